"""A class through the server, then its final run: do the final points rank the code, not the hour?

A real server (embedded broker), one runner, the t2-mpi package. Students hand in variants of
t2 whose rank 0 sums SHARE % of the range (two ranks run at about 100/SHARE times one: 100 is
serial in effect, 50 the even split of the reference), PER_VARIANT students each, every file
differing from its variant's others only by a comment. Every student submits once (graded live,
in whatever state the host is), then the final run goes RUNS times. The table gives, per variant,
the spread of live points and of final points among its students, and the largest change of a
student's final points from one final run to the next; the extra gives the class's rank
inversions (two students whose variants' quiet speedups are ≥ 10 % apart, ranked the wrong way by
their figures) live and final, and runner seconds per student (a live grading vs one final run).

    .venv/bin/python -m bench.final_run [--per-variant 4] [--shares 100,80,70,60,50]
                                        [--rounds 3] [--runs 2] [--anchor] [--tenant ON,OFF]
                                        [--neighbour K[,LEAVE_S]] [--busy-wait S]

Record `bench.core_speed` just before (how noisy the hour was). `--tenant ON,OFF`: a neighbour
spins on the node's last core ON s of every ON + OFF the whole time (the live gradings and the
final runs alike), a noisy stretch that can be repeated. `--neighbour K,LEAVE_S`: K processes
spin unpinned on every core (tests/neighbour.py) from before the live gradings until LEAVE_S
seconds into the first final run (no LEAVE_S: the whole time), a node that other work keeps
busy; `--busy-wait S`: the final run's busy limit (the server's final_busy_wait_s). The extra
then counts the turns that found the node busy and the students whose live points were kept.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select

from bench.common import publish
from bench.timing_interference import tenant
from server.models import AssignmentVersion, FinalTurn, Job, Submission
from server.services.grades import reference
from server.settings import REPO_ROOT
from tests.neighbour import neighbour, stop
from tests.server.live import Platform, wait_until

SLUG = "t2-mpi"
TEMPLATE = (REPO_ROOT / "tests/fixtures/t2-variants/uneven_72.py").read_text()


def variant(share: int, student: str) -> bytes:
    """t2 with rank 0 summing `share` % of the range, signed by `student` (a comment)."""
    assert "72 + 28 *" in TEMPLATE
    code = TEMPLATE.replace("72 + 28 *", f"{share} + {100 - share} *")
    return f"# {student}'s solution\n{code}".encode()


def _seconds(p: Platform, kind: str) -> list[float]:
    """Wall seconds of every finished job of this kind (claim to result)."""
    with p.sessions() as s:
        return [(j.finished_at - j.claimed_at).total_seconds() for j in s.scalars(
            select(Job).where(Job.kind == kind, Job.state == "done"))
            if j.finished_at and j.claimed_at]


def _turn_grading_s(p: Platform) -> list[float]:
    """Each final-run turn's grading alone (the report's wall time: sandboxes, warm-up, timing)."""
    with p.sessions() as s:
        return [t for t in s.scalars(select(FinalTurn.timed_s)) if t is not None]


def _pooled(p: Platform) -> dict[str, float | int] | None:
    """The reference's speedup as validation measured it and as the server pools it now."""
    with p.sessions() as s:
        version = s.scalars(select(AssignmentVersion)).first()
        found = None if version is None else reference.pooled(session=s, version=version)
    if found is None:
        return None
    return {"validated": found.validated, "pooled": found.figure, "students": found.students}


def _inversions(figure: dict[str, float], quiet: dict[str, float]) -> int:
    """Pairs of students whose quiet speedups are ≥ 10 % apart, ranked the wrong way."""
    return sum(1 for a, b in itertools.combinations(figure, 2)
               if (quiet[a] >= 1.1 * quiet[b] and figure[a] < figure[b])
               or (quiet[b] >= 1.1 * quiet[a] and figure[b] < figure[a]))


@dataclass
class _ClassRun:
    """What the stages have gathered so far, student by student and final run by final run."""

    share_of: dict[str, int] = field(default_factory=dict)  # student: their variant's share
    phases: dict[str, float] = field(default_factory=dict)  # each stage's wall seconds
    live: dict[str, tuple[float, float, str]] = field(default_factory=dict)  # points, speedup, credit
    finals: list[dict[str, tuple[float, float]]] = field(default_factory=list)  # points, speedup
    ranges: list[dict[str, tuple[float, float]]] = field(default_factory=list)  # rounds: low, high
    busy_turns: list[int] = field(default_factory=list)  # per final run: turns that found the node busy
    kept: list[int] = field(default_factory=list)  # per final run: live points kept (node busy)
    pooled_at_start: dict[str, float | int] | None = None  # the reference as the final run fixed it


def _validated_course(p: Platform, run: _ClassRun, *, anchor: bool) -> str:
    """The course with t2 in it, validated by the one runner; returns the course's join code."""
    code = p.course(f"treasure-hunt/{SLUG}")
    p.start_runner("cpu-1", "cpu,mpi", env={"PARAGRADE_ANCHOR": "true"} if anchor else None)
    clock = time.monotonic()
    wait_until("t2 to validate", lambda: p.get(
        p.prof, f"/api/courses/c/assignments/{SLUG}")["validation"] == "ready", 600)
    run.phases["validation_s"] = round(time.monotonic() - clock, 1)
    return code


def _live_gradings(p: Platform, run: _ClassRun, code: str, *, shares: list[int],
                   per_variant: int) -> None:
    """Every student joins and submits their variant once; waits until each is graded."""
    clock = time.monotonic()
    for share in shares:
        for i in range(per_variant):
            name = f"s{share}x{i}"
            run.share_of[name] = share
            p.submit(p.student(name, code), SLUG, variant(share, name))

    def pending() -> int:
        with p.sessions() as s:
            return len(s.scalars(select(Submission.id).where(
                Submission.status.in_(("queued", "running")))).all())

    wait_until("every live grading", lambda: pending() == 0, 120 * len(run.share_of), 1)
    run.phases["live_s"] = round(time.monotonic() - clock, 1)


def _live_figures(p: Platform, run: _ClassRun) -> None:
    """Each student's live points, speedup and credit status, as the instructor reads them."""
    with p.sessions() as s:
        subs = [(sub.id, sub.user.name) for sub in s.scalars(select(Submission))]
    for sid, name in subs:
        got = p.get(p.prof, f"/api/submissions/{sid}")
        report = got.get("report") or {}
        sp, credit = report.get("speedup"), report.get("credit") or {}
        run.live[name] = (got["score"] or 0.0, sp["median"] if sp else 0.0,
                          credit.get("status", ""))


def _final_run(p: Platform, run: _ClassRun, i: int, *, rounds: int,
               procs: list[subprocess.Popen[bytes]], leave_s: float | None) -> None:
    """One final run (`i` before it): started by the instructor, waited for, each grade kept."""
    clock = time.monotonic()
    r = p.http.post(f"/api/courses/c/assignments/{SLUG}/final-runs",
                    json={"rounds": rounds}, headers=p.prof)
    r.raise_for_status()
    url = f"/api/courses/c/assignments/{SLUG}/final-runs/{r.json()['id']}"

    def settled() -> dict[str, Any] | None:
        if procs and leave_s is not None and time.monotonic() - clock >= leave_s:
            stop(procs)  # the neighbour leaves, LEAVE_S into the first final run
            procs.clear()
        got: dict[str, Any] = p.get(p.prof, url)
        return got if got["status"] == "done" else None

    done = wait_until("the final run", settled, 200 * rounds * len(run.share_of), 2)
    run.finals.append({g["email"].split("@")[0]: (g["score"], g["speedup"] or 0.0)
                       for g in done["grades"]})
    run.busy_turns.append(done["busy"])
    run.kept.append(sum(1 for g in done["grades"] if g["node_busy"]))
    run.ranges.append({g["email"].split("@")[0]: (g["low"] or 0.0, g["high"] or 0.0)
                       for g in done["grades"]})
    run.phases[f"final_run_{i + 1}_s"] = round(time.monotonic() - clock, 1)


def _row(run: _ClassRun, share: int) -> dict[str, Any]:
    """One variant's row: its students' spread of live and final figures, and the rerun's change."""
    live, finals = run.live, run.finals
    mine = [n for n in run.share_of if run.share_of[n] == share]
    live_pts = [live[n][0] for n in mine]
    final_pts = [finals[0][n][0] for n in mine]
    return {
        "share": share, "quiet": round(100 / share, 2), "students": len(mine),
        "live_speedups": f"{min(live[n][1] for n in mine):.2f}–"
                         f"{max(live[n][1] for n in mine):.2f}",
        "live_points": f"{min(live_pts):.1f}–{max(live_pts):.1f}",
        "final_speedups": f"{min(finals[0][n][1] for n in mine):.2f}–"
                          f"{max(finals[0][n][1] for n in mine):.2f}",
        "final_points": f"{min(final_pts):.1f}–{max(final_pts):.1f}",
        "spread": round(max(final_pts) - min(final_pts), 1),
        "rerun": round(max((abs(f[n][0] - finals[0][n][0]) for f in finals[1:]
                            for n in mine), default=0.0), 1)}


def _extra(p: Platform, run: _ClassRun, *, rounds: int, runs: int, anchor: bool,
           spinners: int, leave_s: float | None) -> dict[str, Any]:
    """The class's figures beside the table: rank inversions, runner seconds, the busy node."""
    share_of, live, finals, ranges = run.share_of, run.live, run.finals, run.ranges
    quiet = {n: 100 / share_of[n] for n in share_of}
    grading_s, turn_s = _seconds(p, "grade"), _seconds(p, "final")
    inside = _turn_grading_s(p)
    return {
        "inversions_live": _inversions({n: live[n][1] for n in share_of}, quiet),
        "inversions_final": [_inversions({n: f[n][1] for n in share_of}, quiet)
                             for f in finals],
        # Does a final run's range (its lowest and highest round) hold the next run's figure?
        "next_run_inside_range": [
            sum(1 for n in share_of if ranges[i][n][0] <= finals[i + 1][n][1]
                <= ranges[i][n][1]) for i in range(runs - 1)],
        "grading_s_median": round(statistics.median(grading_s), 1) if grading_s else None,
        "final_run_s_per_student": round(sum(turn_s) / runs / len(share_of), 1),
        # A turn's job (claim to result) against its grading alone: the rest is the job's
        # own cost (fetching, unpacking, posting), paid once per turn.
        "turn_s_median": round(statistics.median(turn_s), 1) if turn_s else None,
        "turn_grading_s_median": round(statistics.median(inside), 1) if inside else None,
        "rounds": rounds, "runs": runs, "anchor": anchor, **run.phases,
        "neighbour": f"{spinners} spinners, leaving {leave_s} s into the first final run"
        if spinners else None,
        "busy_turns": run.busy_turns, "live_points_kept": run.kept,
        "live_pending": sum(1 for n in live if live[n][2] == "pending"),
        # The reference's speedup: validation's, pooled over the live gradings (what the
        # final run fixed), and pooled after the final runs' turns too.
        "reference": {"at_final_run": run.pooled_at_start, "after": _pooled(p)}}


def measure(tmp: Path, *, shares: list[int], per_variant: int, rounds: int,
            runs: int, anchor: bool = False, spinners: int = 0, leave_s: float | None = None,
            busy_wait_s: int | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The class graded live, then `runs` final runs: the table's rows and the extra."""
    p = Platform(tmp, f"sqla+sqlite:///{tmp / 'broker.sqlite'}")
    if busy_wait_s is not None:
        p.settings.final_busy_wait_s = busy_wait_s
    beside = contextlib.ExitStack()
    procs = beside.enter_context(neighbour(spinners)) if spinners else []
    try:
        run = _ClassRun()
        code = _validated_course(p, run, anchor=anchor)
        _live_gradings(p, run, code, shares=shares, per_variant=per_variant)
        _live_figures(p, run)
        run.pooled_at_start = _pooled(p)
        for i in range(runs):
            _final_run(p, run, i, rounds=rounds, procs=procs, leave_s=leave_s)
        rows = [_row(run, share) for share in shares]
        return rows, _extra(p, run, rounds=rounds, runs=runs, anchor=anchor,
                            spinners=spinners, leave_s=leave_s)
    finally:
        p.close()
        beside.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-variant", type=int, default=4)
    ap.add_argument("--shares", default="100,80,70,60,50",
                    help="rank 0's share of the range (%%) of each variant")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--anchor", action="store_true",
                    help="the runner anchors each figure to the reference (PARAGRADE_ANCHOR)")
    ap.add_argument("--tenant", help="ON,OFF: spin on the last core ON s of every ON + OFF")
    ap.add_argument("--neighbour", help="K[,LEAVE_S]: K spinners on every core until LEAVE_S "
                                        "s into the first final run (none: the whole time)")
    ap.add_argument("--busy-wait", type=int, help="the final run's busy limit, seconds")
    args = ap.parse_args()
    spinners, leave_s = 0, None
    if args.neighbour:
        k, _, leave = args.neighbour.partition(",")
        spinners, leave_s = int(k), float(leave) if leave else None
    shares = [int(s) for s in args.shares.split(",")]
    on, off = (float(x) for x in args.tenant.split(",")) if args.tenant else (0.0, 0.0)
    beside = (tenant(max(os.sched_getaffinity(0)), on, off) if args.tenant
              else contextlib.nullcontext())
    with tempfile.TemporaryDirectory() as tmp, beside:
        rows, extra = measure(Path(tmp), shares=shares, per_variant=args.per_variant,
                              rounds=args.rounds, runs=args.runs, anchor=args.anchor,
                              spinners=spinners, leave_s=leave_s, busy_wait_s=args.busy_wait)
        extra["tenant"] = args.tenant
    publish("final_run", rows, {
        "share": "rank 0's share", "quiet": "quiet speedup", "students": "students",
        "live_speedups": "live speedups", "live_points": "live points",
        "final_speedups": "final speedups", "final_points": "final points",
        "spread": "final spread", "rerun": "largest change, next run"}, extra)
    print(extra)


if __name__ == "__main__":
    main()
