"""A deadline burst on runners that follow the queue, against a fixed fleet of the same size.

On a two-node SLURM cluster of this host (tests/slurm_cluster.py), N submissions of a short
package (tests/fixtures/queue/quick, about a second each) arrive at once, from 4 each of N/4
students, in three runs:

- **fixed**: two runners started before the burst and kept (`min = max = 2`);
- **scaled**: from zero runners, `paragrade admin scale` submitting pilots (at most 2, one per
  waiting job, leaving after 10 s idle);
- **scaled, faults**: the same with pilots of a 2-minute allocation drained 90 s before its end
  (about 30 s after its start: SLURM checks its signals' times every half minute or so), so
  every pilot's allocation ends mid-burst and the job it grades then goes back to the queue; and
  one pilot `scancel`ed while it grades a submission that sleeps 8 s.

Per run: time from the first submission to the first grading started, the queue wait (claim
minus submission) p50/p95, the last grading's end, runner-seconds (runners running, sampled every
0.5 s from squeue) up to the last grading and after it until the fleet is at rest (a fixed fleet
holds its runners on), the runners that ran, how many were drained and how many jobs were handed
back, and whether every submission was graded exactly once. The fleet's size over time, with the jobs
waiting, is drawn in docs/operators/autoscale-burst.svg.

Usage (root, SLURM and Redis as the suite needs them):
  .venv/bin/python -m bench.autoscale_burst [N] [--modes fixed,scaled,faults] [--idle-exit S]
  (default 60, every run; the scaled run is always among them: the figure draws its queue)
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from bench.common import figure, publish
from server.models import GradeReportRow, Job, aware
from tests.pilots import PACKAGES, Scaled, available
from tests.server.live import wait_until, wait_while_moving
from tests.slurm_cluster import SlurmCluster, missing

GOOD = (PACKAGES / "quick" / "reference" / "solution.py").read_bytes()
SLOW = b"import time\n\n\ndef total(n, workers=1):\n    time.sleep(8)\n    return n * (n - 1) // 2\n"
PLOT = Path(__file__).resolve().parent.parent / "docs" / "operators" / "autoscale-burst.svg"
RUNS = {"fixed": {"min": 2, "max": 2, "idle_exit_s": 3600},
        "scaled": {"max": 2, "idle_exit_s": 10},
        "scaled, faults": {"max": 2, "idle_exit_s": 10, "time_limit_s": 120, "drain_s": 90}}


def _sample(s: Scaled, samples: list[tuple[float, int, int, int]], stop: threading.Event,
            t0: float, seen: set[str]) -> None:
    while not stop.wait(0.5):
        pilots = s.pilots()
        seen.update(name for name, (_, state) in pilots.items() if state == "RUNNING")
        states = [state for _, state in pilots.values()]
        with s.p.sessions() as db:
            waiting = db.scalar(select(func.count()).select_from(Job).where(
                Job.kind == "grade", Job.state == "queued")) or 0
        samples.append((time.monotonic() - t0, states.count("RUNNING"),
                        len(states) - states.count("RUNNING"), int(waiting)))


Samples = list[tuple[float, int, int, int]]


def one_run(mode: str, n: int, shared: Path, cluster: SlurmCluster, idle_exit_s: int | None
            ) -> tuple[dict[str, Any], Samples]:
    tmp = Path(tempfile.mkdtemp(dir=shared))
    idle = {} if idle_exit_s is None or mode == "fixed" else {"idle_exit_s": idle_exit_s}
    s = Scaled(tmp, shared, cluster, queue={"scale_in_delay_s": 0, "time_limit_s": 900,
                                            "drain_s": 600, **RUNS[mode], **idle})
    try:
        code = s.p.course("quick")
        # A pilot starts, then validates: on a busy host that takes longer, so the wait follows
        # the validation's job (its state, its runner's heartbeats) and the pilots' states.
        wait_while_moving("the package to validate", lambda: s.p.get(
            s.p.prof, "/api/courses/c/assignments/quick")["validation"] == "ready",
            lambda: (s.jobs(), s.pilots()))
        students = [s.p.student(f"s{k}", code) for k in range((n + 3) // 4)]
        if mode == "fixed":
            wait_until("the fixed fleet", lambda: [st for _, st in s.pilots().values()]
                       == ["RUNNING"] * 2, 60)
        else:  # the validation's pilot leaves: the burst starts from zero runners
            wait_until("the fleet at rest", lambda: not s.pilots(), 60)
        samples: list[tuple[float, int, int, int]] = []
        seen: set[str] = set()
        stop = threading.Event()
        t0 = time.monotonic()
        threading.Thread(target=_sample, args=(s, samples, stop, t0, seen), daemon=True).start()
        sids = []
        for k in range(n):
            slow = mode == "scaled, faults" and k == 3
            sids.append(s.p.submit(students[k // 4], "quick", SLOW if slow else GOOD))
        if mode == "scaled, faults":  # cancel the pilot that grades the slow one, mid-grading
            with s.p.sessions() as db:
                slow_job = db.scalar(select(Job.id).where(Job.submission_id == sids[3]))
            def holder() -> str | None:
                with s.p.sessions() as db:
                    job = db.get(Job, slow_job)
                    return job.runner if job is not None and job.state == "claimed" else None
            pilot = wait_until("a pilot to grade the slow one", holder, 120)
            time.sleep(2)
            jid = s.pilots()[pilot][0]
            import subprocess
            subprocess.run(["scancel", jid], env=cluster.env, check=True)
        wait_until("the burst graded", lambda: all(
            s.p.get(students[k // 4], f"/api/submissions/{sid}")["status"] == "graded"
            for k, sid in enumerate(sids)), 900, 1.0)
        end = time.monotonic() - t0
        if mode != "fixed":
            wait_until("the fleet back at rest", lambda: not s.pilots(), 120)
        rest = time.monotonic() - t0
        time.sleep(1)
        stop.set()
        with s.p.sessions() as db:
            jobs = list(db.scalars(select(Job).where(Job.kind == "grade")))
            reports = dict(db.execute(select(GradeReportRow.submission_id, func.count())
                                      .group_by(GradeReportRow.submission_id)).all())
        first = min(aware(j.created_at) for j in jobs)
        waits = sorted((aware(j.claimed_at) - aware(j.created_at)).total_seconds()
                       for j in jobs if j.claimed_at is not None)
        started = min(aware(j.claimed_at) for j in jobs if j.claimed_at is not None)
        burst_s = sum(0.5 * r for t, r, _, _ in samples if t <= end)
        after_s = sum(0.5 * r for t, r, _, _ in samples if t > end)
        logs = [s.runner_log(name) for name in seen]
        row = {"mode": mode, "n": n, "first_s": (started - first).total_seconds(),
               "p50": statistics.median(waits), "p95": waits[int(0.95 * (len(waits) - 1))],
               "end_s": end, "burst_s": burst_s,
               "after": "held" if mode == "fixed" else f"{after_s:.0f} (at rest at {rest:.0f} s)",
               "pilots": len(seen), "drained": sum("draining" in log for log in logs),
               "handed": sum(log.count(" handed back: ") for log in logs),
               "once": sorted(set(reports.get(sid, 0) for sid in sids)) == [1],
               "lost": sum(1 for sid in sids if reports.get(sid, 0) == 0)}
        print(row, flush=True)
        return row, samples
    finally:
        s.close()


def _svg(series: dict[str, list[tuple[float, int, int, int]]]) -> str:
    """Runners running over time for each run (left axis), and the scaled run's waiting jobs
    (dashed, right axis)."""
    w, h, left, right, bottom = 660, 270, 48, 58, 34
    t_max = max(t for s in series.values() for t, *_ in s) or 1
    q_max = max(10, -(-max(q for _, _, _, q in series["scaled"]) // 10) * 10)
    colours = {"fixed": "#666", "scaled": "#1f6fb2", "scaled, faults": "#c2410c"}

    def x(t: float) -> float:
        return left + (w - left - right) * t / t_max

    def y(v: float, top: float = 2.5) -> float:
        return h - bottom - (h - bottom - 12) * v / top

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" role="img" '
             'aria-label="Runners running over a deadline burst of 60 submissions: a fixed '
             'fleet, pilots that follow the queue, pilots under faults; and the jobs waiting">',
             f'<rect width="{w}" height="{h}" fill="white"/>',
             f'<line x1="{left}" y1="{y(0)}" x2="{w - right}" y2="{y(0)}" stroke="black"/>',
             f'<line x1="{left}" y1="{y(0)}" x2="{left}" y2="12" stroke="black"/>',
             f'<line x1="{w - right}" y1="{y(0)}" x2="{w - right}" y2="12" stroke="#1f6fb2"/>']
    for v in (0, 1, 2):
        parts.append(f'<text x="{left - 6}" y="{y(v) + 4}" font-size="11" text-anchor="end">{v}'
                     '</text>')
    for q in (0, q_max // 2, q_max):
        parts.append(f'<text x="{w - right + 5}" y="{y(q / q_max * 2.5) + 4}" font-size="11" '
                     f'fill="#1f6fb2">{q}</text>')
    step = max(10, int(t_max) // 8 // 10 * 10)
    for t in range(0, int(t_max) + 1, step):
        parts.append(f'<text x="{x(t)}" y="{h - bottom + 16}" font-size="11" '
                     f'text-anchor="middle">{t}</text>')
    parts.append(f'<text x="{(w + left - right) / 2}" y="{h - 4}" font-size="12" '
                 'text-anchor="middle">seconds since the first submission</text>')
    parts.append(f'<text x="12" y="{h / 2}" font-size="12" transform="rotate(-90 12 {h / 2})" '
                 'text-anchor="middle">runners running</text>')
    parts.append(f'<text x="{w - 8}" y="{h / 2}" font-size="12" fill="#1f6fb2" '
                 f'transform="rotate(90 {w - 8} {h / 2})" text-anchor="middle">jobs waiting '
                 '(scaled)</text>')
    for k, (mode, pts) in enumerate(series.items()):
        path = " ".join(f"{x(t):.1f},{y(r + 0.03 * k):.1f}" for t, r, _, _ in pts)
        parts.append(f'<polyline fill="none" stroke="{colours[mode]}" stroke-width="2" '
                     f'points="{path}"/>')
        parts.append(f'<text x="{w - right - 6}" y="{26 + 15 * k}" font-size="12" '
                     f'text-anchor="end" fill="{colours[mode]}">{mode}</text>')
    waiting = " ".join(f"{x(t):.1f},{y(q / q_max * 2.5):.1f}" for t, _, _, q in series["scaled"])
    parts.append(f'<polyline fill="none" stroke="#1f6fb2" stroke-dasharray="4 3" '
                 f'stroke-width="1" points="{waiting}"/>')
    return "\n".join([*parts, "</svg>"]) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("n", nargs="?", type=int, default=60)
    parser.add_argument("--modes", default="fixed,scaled,faults")
    parser.add_argument("--idle-exit", type=int, default=None, metavar="S",
                        help="pilots leave after S s idle instead of 10 (the suite's tiny run)")
    args = parser.parse_args()
    short = {mode.split(", ")[-1]: mode for mode in RUNS}  # fixed, scaled, faults
    modes = [short[m] for m in args.modes.split(",") if m in short]
    if "scaled" not in modes or len(modes) != len(args.modes.split(",")):
        raise SystemExit(f"--modes: some of {', '.join(short)}, scaled among them")
    if why := missing():
        raise SystemExit(f"needs SLURM: {why}")
    if not available():
        raise SystemExit("needs Redis on 127.0.0.1:6379")
    shared = Path(tempfile.mkdtemp(prefix="paragrade-burst-"))
    shared.chmod(0o755)
    cluster = SlurmCluster(shared / "cluster", nodes=2).start()
    try:
        rows, series = [], {}
        for mode in modes:
            row, samples = one_run(mode, args.n, shared, cluster, args.idle_exit)
            rows.append(row)
            series[mode] = samples
    finally:
        cluster.stop()
        shutil.rmtree(shared, ignore_errors=True)
    figure(PLOT).write_text(_svg(series))
    publish("autoscale_burst", rows, {
        "mode": "fleet", "n": "submissions", "first_s": "first grading started (s) %.1f",
        "p50": "queue wait p50 (s) %.1f", "p95": "p95 (s) %.1f", "end_s": "last graded (s) %.1f",
        "burst_s": "runner-seconds to the last grading %.0f",
        "after": "runner-seconds after it", "pilots": "runners that ran",
        "drained": "drained (SIGUSR1)", "handed": "jobs handed back", "lost": "lost",
        "once": "each graded exactly once"}, extra={"samples": series})


if __name__ == "__main__":
    main()
