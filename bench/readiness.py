"""How right a first start's "being checked, ready in about N s" is, package by package.

A real server (embedded broker) with the shipped courses imported, and one runner serving what
`paragrade serve`'s local runner serves on a machine without a GPU (cpu, mpi, gpusim, and two
stand-in nodes for mpinodes). Every `--every` seconds the bench reads each package's readiness
as its students' page says it; once the package is ready (or refused), each "about N s" read is
compared with the time that was in fact left. An estimate is right when it is within a factor of
two of what was left, or within 10 s of it (the sentence rounds up to 5 s and whole minutes, and
the bench reads every 2 s). The table: per package, how long its check ran on the runner, when it
was ready, the first estimate read and what was left then, and how many estimates were right.
`--next-term` then imports every package into a second course (a new term on the same server)
and measures that round too: its estimates come from each package's own check in the first.

    .venv/bin/python -m bench.readiness [--packages treasure-hunt/t1-multiprocessing,...]
                                        [--every 2] [--next-term]
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy import select

from bench.common import publish
from server.models import Assignment, AssignmentVersion, Job
from server.settings import REPO_ROOT
from tests.server.live import Platform, wait_until

ABOUT = re.compile(r"ready in about (\d+) (s|min)")
SLACK_S = 10.0


def estimate(sentence: str | None) -> float | None:
    """The seconds an 'about N s / N min' sentence promises; None for any other sentence."""
    found = ABOUT.search(sentence or "")
    if found is None:
        return None
    return float(found[1]) * (60 if found[2] == "min" else 1)


def right(promised: float, left: float) -> bool:
    return abs(promised - left) <= SLACK_S or 0.5 <= promised / max(left, 1e-9) <= 2


def _assignment(p: Platform, pkg: str) -> dict[str, Any]:
    course, slug = pkg.split("/")
    got: dict[str, Any] = p.get(p.prof, f"/api/courses/{course}/assignments/{slug}")
    return got


def _said(p: Platform, pkg: str) -> str | None:
    said: str | None = _assignment(p, pkg)["readiness"]
    return said


def _check_seconds(p: Platform) -> dict[str, list[float]]:
    """Each package's finished validations, claim to result, oldest first."""
    with p.sessions() as s:
        rows = s.execute(select(Assignment.slug, Job.claimed_at, Job.finished_at)
                         .join(AssignmentVersion, AssignmentVersion.id == Job.version_id)
                         .join(Assignment, Assignment.id == AssignmentVersion.assignment_id)
                         .where(Job.kind == "validate", Job.state == "done")
                         .order_by(Job.id)).all()
    out: dict[str, list[float]] = {}
    for slug, claimed, finished in rows:
        if claimed and finished:
            out.setdefault(slug, []).append((finished - claimed).total_seconds())
    return out


def _round(p: Platform, packages: list[str], every: float, limit_s: float
           ) -> dict[str, dict[str, Any]]:
    """Read every package's readiness until each is ready; what was read and when it was ready."""
    seen: dict[str, list[tuple[float, float]]] = {pkg: [] for pkg in packages}
    ready: dict[str, tuple[float | None, str]] = {}
    start = time.monotonic()
    while len(ready) < len(packages) and time.monotonic() - start < limit_s:
        for pkg in packages:
            if pkg in ready:
                continue
            got = _assignment(p, pkg)
            at = time.monotonic() - start
            if got["validation"] != "validating":
                ready[pkg] = (at, got["validation"])
            elif (n := estimate(got["readiness"])) is not None:
                seen[pkg].append((at, n))
            elif "waiting for" in (got["readiness"] or "") and not seen[pkg]:
                ready[pkg] = (None, got["readiness"])  # no runner here serves it: no estimate
        time.sleep(every)
    return {pkg: {"reads": seen[pkg], "ready_s": ready.get(pkg, (None, "timed out"))[0],
                  "state": ready.get(pkg, (None, "timed out"))[1]} for pkg in packages}


def _rows(found: dict[str, dict[str, Any]], checks: dict[str, list[float]],
          label: str) -> list[dict[str, Any]]:
    rows = []
    for pkg, f in found.items():
        reads, ready_s = f["reads"], f["ready_s"]
        if ready_s is None:
            rows.append({"round": label, "package": pkg, "check_s": "–", "ready_s": f["state"],
                         "first": "–", "right": "–"})
            continue
        ok = [right(n, ready_s - at) for at, n in reads]
        first = f"{reads[0][1]:.0f} s (left {ready_s - reads[0][0]:.0f} s)" if reads else "–"
        slug_checks = checks.get(pkg.split("/")[1], [])
        rows.append({"round": label, "package": pkg,
                     "check_s": f"{slug_checks[-1]:.0f}" if slug_checks else "–",
                     "ready_s": f"{ready_s:.0f} ({f['state']})", "first": first,
                     "right": f"{sum(ok)}/{len(ok)}"})
    return rows


def _share(found: dict[str, dict[str, Any]]) -> dict[str, Any]:
    ratios = [n / max(f["ready_s"] - at, 1e-9) for f in found.values() if f["ready_s"]
              for at, n in f["reads"]]
    oks = [right(n, f["ready_s"] - at) for f in found.values() if f["ready_s"]
           for at, n in f["reads"]]
    return {"estimates": len(oks), "right": sum(oks),
            "median_ratio": round(statistics.median(ratios), 2) if ratios else None}


def measure(tmp: Path, packages: list[str], every: float, next_term: bool,
            limit_s: float = 2400) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    p = Platform(tmp, f"sqla+sqlite:///{tmp / 'broker.sqlite'}")
    try:
        courses = sorted({pkg.split("/")[0] for pkg in packages})
        for course in courses:
            p.course(*[pkg for pkg in packages if pkg.startswith(f"{course}/")], slug=course)
        p.start_runner("local", "cpu,mpi,gpusim", options=("--stand-in-nodes",))
        wait_until("the runner to say hello", lambda: any(  # until then all wait for a runner
            estimate(_said(p, pkg)) is not None for pkg in packages), 120, 0.2)
        first = _round(p, packages, every, limit_s)
        rows = _rows(first, _check_seconds(p), "first start")
        extra: dict[str, Any] = {"first_start": _share(first)}
        if next_term:  # the same packages in a course of their own: their own checks known
            p.course(*packages, slug="next")
            nexts = [f"next/{pkg.split('/')[1]}" for pkg in packages]
            second = _round(p, nexts, every, limit_s)
            rows += _rows(second, _check_seconds(p), "next term")
            extra["next_term"] = _share(second)
        return rows, extra
    finally:
        p.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--packages", default=",".join(sorted(
        f"{m.parent.parent.name}/{m.parent.name}"
        for m in (REPO_ROOT / "assignments").glob("*/*/assignment.toml"))))
    ap.add_argument("--every", type=float, default=2.0)
    ap.add_argument("--next-term", action="store_true",
                    help="then import every package into a second course and measure that too")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows, extra = measure(Path(tmp), args.packages.split(","), args.every, args.next_term)
    publish("readiness", rows, {
        "round": "round", "package": "package", "check_s": "check s", "ready_s": "ready after s",
        "first": "first estimate", "right": "right within ×2"}, extra)
    print(extra)


if __name__ == "__main__":
    main()
