"""Practice runs: what one costs a runner, with and without a profile, per shipped package, and
what practice traffic costs a graded submission's wait.

- **Runner seconds**: N practice runs of each package's reference in each mode (the public
  tests; with one short timing; with a profile of one call), graded here by the engine as a
  runner would (`grader.grade(practice=…, profile=…)`): the wall seconds of each.
- **A graded job behind practice**: a real server and one runner (embedded broker, as the
  one-command start), Q practice runs of t1 queued by students, then one graded submission. Its
  wait (claimed minus submitted) against one running job's length (the longest practice run,
  claim to finish): graded work waits for the job in hand, never for the practice queue.

Usage: .venv/bin/python -m bench.practice [N] [--packages COURSE/SLUG,…] [--queued Q]
(default: 3 runs of t1-multiprocessing and t2-mpi, 20 queued)
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy import select

from bench.common import publish
from runners import package
from runners.grading import grader
from server.models import Job
from server.settings import REPO_ROOT
from tests.server.live import Platform, wait_until

MODES = {"public tests": ("tests", False), "with a short timing": ("timed", False),
         "with a profile": ("tests", True)}
T1 = "t1-multiprocessing"


def runner_seconds(ref: str, n: int) -> list[dict[str, Any]]:
    """Each mode's wall seconds for `n` practice runs of `ref`'s reference."""
    a = package.load(REPO_ROOT / "assignments" / ref)
    code = package.code_of(a, "reference")
    rows = []
    for mode, (practice, profile) in MODES.items():
        seconds = []
        for _ in range(n):
            started = time.monotonic()
            r = grader.grade(a, code, practice=practice, profile=profile)  # type: ignore[arg-type]
            assert r.practice and r.verdict.value == "passed", r.summary
            seconds.append(time.monotonic() - started)
        rows.append({"package": ref, "mode": mode, "runs": n,
                     "median_s": round(statistics.median(seconds), 2),
                     "max_s": round(max(seconds), 2)})
    return rows


def graded_behind_practice(tmp: Path, queued: int) -> dict[str, Any]:
    """One graded submission's wait with `queued` practice runs ahead of it on one runner."""
    p = Platform(tmp, f"sqla+sqlite:///{tmp / 'broker.sqlite'}")
    try:
        code = p.course(f"treasure-hunt/{T1}")
        p.start_runner("cpu-1", "cpu")
        wait_until("t1 to validate", lambda: p.get(
            p.prof, f"/api/courses/c/assignments/{T1}")["validation"] == "ready", 600)
        reference = (REPO_ROOT / "assignments/treasure-hunt" / T1 / "reference/solution.py"
                     ).read_bytes()
        students = [p.student(f"s{i}", code) for i in range((queued + 5) // 6)]
        for i in range(queued):  # six a student, each student's hourly limit
            r = p.http.post(f"/api/courses/c/assignments/{T1}/practice",
                            headers=students[i // 6],
                            files=[("files", ("solution.py", reference))])
            assert r.status_code == 201, r.text
        graded = p.submit(students[0], T1, reference)
        wait_until("the graded submission", lambda: p.get(
            p.prof, f"/api/submissions/{graded}")["status"] == "graded", 600)
        wait_until("every practice run", lambda: all(
            r["status"] in ("done", "error") for r in p.get(
                p.prof, f"/api/courses/c/assignments/{T1}/practice/all")), 60 * queued + 120)
        with p.sessions() as s:
            jobs = list(s.scalars(select(Job).where(Job.kind.in_(("grade", "practice")))))
            mine = next(j for j in jobs if j.kind == "grade" and j.submission_id == graded)
            practice = [j for j in jobs if j.kind == "practice"]
            assert mine.claimed_at is not None
            wait = (mine.claimed_at - mine.created_at).total_seconds()
            lengths = [(j.finished_at - j.claimed_at).total_seconds() for j in practice
                       if j.finished_at is not None and j.claimed_at is not None]
            before = sum(1 for j in practice if j.claimed_at is not None
                         and j.claimed_at < mine.claimed_at)
        return {"queued": queued, "graded_wait_s": round(wait, 1),
                "longest_practice_job_s": round(max(lengths), 1),
                "practice_claimed_before_it": before,
                "practice_done": len(lengths)}
    finally:
        p.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("n", nargs="?", type=int, default=3)
    ap.add_argument("--packages", default=f"treasure-hunt/{T1},treasure-hunt/t2-mpi")
    ap.add_argument("--queued", type=int, default=20)
    args = ap.parse_args()
    rows = [row for ref in args.packages.split(",") for row in runner_seconds(ref, args.n)]
    with tempfile.TemporaryDirectory(prefix="paragrade-bench-practice-") as tmp:
        behind = graded_behind_practice(Path(tmp), args.queued)
    publish("practice", rows, {"package": "package", "mode": "practice run",
                               "runs": "runs", "median_s": "runner s (median) %.2f",
                               "max_s": "max s %.2f"}, extra=behind)
    print(f"\na graded submission behind {behind['queued']} queued practice runs waited "
          f"{behind['graded_wait_s']} s (the longest practice job: "
          f"{behind['longest_practice_job_s']} s; {behind['practice_claimed_before_it']} "
          "practice job(s) claimed before it)")


if __name__ == "__main__":
    main()
