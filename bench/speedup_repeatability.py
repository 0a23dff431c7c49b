"""Repeatability: the spread of the speedup and of the performance points over N gradings of
each shipped reference, one grading at a time, each with its own inputs: CV of the speedup, the
points' largest distance from their median, and how often one grading's 95 % CI holds another's
median (CI coverage, over every ordered pair). With `--busy K`, the same while K other graders
grade the reference on disjoint core slices (a node's runner slots all busy) against idle; with
`--tenant ON,OFF`, beside a neighbour that spins on the last allotted core ON s of every ON + OFF
(a shared VM taking a core away now and then); with `--compare`, gradings alternate between the
node's probing off and on (runners/measure/capacity.py: before/after in one run); with `--placement`,
between the baseline left to the kernel and placed on each core in turn (runners/measure/placement.py);
with `--anchor`, between the plain ratio to the baseline and the figure anchored to the reference
(runners/measure/anchor.py), the reference's speedup first measured by 3 plain gradings of it
(`--reference-speedup X` gives it instead); with `--file PATH`, that file is graded instead of
the reference; with `--retime`, a grading marked unreliable is graded again after the others and replaced, as
the server's reaper does (the figures are then the final ones a student would see).

Usage: .venv/bin/python -m bench.speedup_repeatability [N] [COURSE/SLUG ...] [--busy K]
  [--tenant ON,OFF] [--compare] [--placement] [--anchor] [--reference-speedup X] [--file PATH]
  [--retime] (default: 10 gradings of
  treasure-hunt/t1-multiprocessing). A grader takes the package's cores from the first cores of
  the node; with --busy the K neighbours take the next slices, and the node needs (K + 1) × cores
  cores. `--neighbour REF` is the neighbours' own mode (grade forever).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import publish
from bench.timing_interference import tenant
from runners import package
from runners.fleet.runner import confine
from runners.grading import grader
from runners.settings import RunnerSettings, get_settings


def _load(ref: str) -> package.Assignment:
    return package.resolve(ref, get_settings().assignments_dir)


def gradings(ref: str, n: int, probes: tuple[bool, ...] = (True,), retime: bool = False,
             placements: tuple[bool, ...] = (True,), anchors: tuple[bool, ...] = (False,),
             reference_speedup: float | None = None, file: Path | None = None
             ) -> list[dict[str, Any]]:
    """n gradings of the reference of `ref` (or of `file`) per mode, one at a time and the modes
    in turn, on this process's cores. `retime`: as the server's reaper does, a grading the
    platform marked unreliable is graded once more, here after the others (the server waits
    `retime_after_s`), and the new figure replaces it, higher or lower. `anchors`: the plain
    figure and the anchored one (to `reference_speedup`), in turn."""
    a = _load(ref)
    code = ({a.manifest.entry.file: file.read_bytes()} if file else package.code_of(a, "reference"))
    modes = {(p, q, x): get_settings().model_copy(update={"timing_probe": p, "baseline_placement": q,
                                                          "anchor": x})
             for p in probes for q in placements for x in anchors}
    rows = []
    for i in range(n):
        for (probe, placed, _), settings in modes.items():
            rows.append(_one(a, ref, code, settings, probe, placed, reference_speedup))
            r = rows[-1]
            print(f"{ref} grading {i + 1} (probe {'on' if probe else 'off'}, baseline "
                  f"{'placed' if placed else 'left to the kernel'}"
                  f"{', anchored' if r['anchored'] else ''}): speedup "
                  f"{r['speedup']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}] perf points "
                  f"{r['points']}, {r['short']} of {r['windows']} windows short"
                  f"{' (unreliable)' if r['unreliable'] else ''}", flush=True)
    if retime:
        for i, r in enumerate(rows):
            if r["unreliable"]:
                rows[i] = {**_one(a, ref, code, modes[r["probe"], r["placed"], r["anchor_mode"]],
                                  r["probe"], r["placed"], reference_speedup), "retimed": True}
                print(f"{ref} grading re-timed: speedup {rows[i]['speedup']:.3f} (was "
                      f"{r['speedup']:.3f}), perf points {rows[i]['points']} (was {r['points']})"
                      f"{' (unreliable again)' if rows[i]['unreliable'] else ''}", flush=True)
    return rows


def _one(a: package.Assignment, ref: str, code: dict[str, bytes], settings: RunnerSettings,
         probe: bool, placed: bool = True, reference_speedup: float | None = None
         ) -> dict[str, Any]:
    started = time.monotonic()
    r = grader.grade(a, code, settings=settings, reference_speedup=reference_speedup)
    if r.speedup is None:
        raise SystemExit(f"{ref}: no speedup measured ({r.summary})")
    seen = r.speedup.interference
    anchor = r.speedup.anchor
    return {"package": ref, "probe": probe, "placed": placed, "anchor_mode": settings.anchor,
            "anchored": anchor is not None, "speedup": r.speedup.median,
            "plain": anchor.baseline_speedup if anchor else r.speedup.median,
            "versus_reference": anchor.versus_reference if anchor else None,
            "ci_low": r.speedup.ci_low, "ci_high": r.speedup.ci_high,
            "points": r.performance_points, "credit": r.credit.status if r.credit else "-",
            "reps": r.speedup.repetitions, "windows": seen.windows if seen else 0,
            "short": seen.short if seen else 0, "unreliable": bool(seen and seen.unreliable),
            "wall_s": time.monotonic() - started}


def measure_reference(ref: str, n: int = 3) -> float:
    """The reference's speedup as a careful validation would take it: the median of n plain
    gradings of it."""
    plain = get_settings().model_copy(update={"anchor": False})
    a = _load(ref)
    figures: list[float] = [_one(a, ref, package.code_of(a, "reference"), plain, True)["speedup"]
                             for _ in range(n)]
    print(f"{ref}: the reference's speedup, {n} plain gradings: "
          f"{', '.join(f'{f:.3f}' for f in figures)}; anchored to their median "
          f"{statistics.median(figures):.3f}", flush=True)
    return statistics.median(figures)


def cv(values: list[float]) -> float:
    mean = statistics.mean(values)
    return statistics.stdev(values) / mean if len(values) > 1 and mean else 0.0


def coverage(rows: list[dict[str, Any]]) -> float:
    """Share of ordered pairs (i, j ≠ i) whose grading i's 95 % CI holds grading j's median."""
    pairs = [(a, b) for a in rows for b in rows if a is not b]
    if not pairs:
        return float("nan")
    return sum(bool(a["ci_low"] <= b["speedup"] <= a["ci_high"]) for a, b in pairs) / len(pairs)


def summary(ref: str, rows: list[dict[str, Any]], mode: str) -> dict[str, Any]:
    sp = [r["speedup"] for r in rows]
    pts = [r["points"] for r in rows]
    mid = statistics.median(pts)
    return {"package": ref, "mode": mode, "gradings": len(rows),
            "median": statistics.median(sp), "cv_speedup": cv(sp),
            "cv_points": cv(pts) if any(pts) else 0.0, "points": f"{min(pts):.1f}–{max(pts):.1f}",
            "points_off": max(abs(p - mid) for p in pts), "coverage": coverage(rows),
            "short": sum(r["short"] for r in rows) / max(1, sum(r["windows"] for r in rows)),
            "unreliable": sum(r["unreliable"] for r in rows),
            "retimed": sum(bool(r.get("retimed")) for r in rows),
            "wall": statistics.mean(r["wall_s"] for r in rows)}


def neighbours(ref: str, k: int, cores: int) -> list[subprocess.Popen[bytes]]:
    """k graders of `ref` looping on the core slices after this process's own."""
    node = sorted(os.sched_getaffinity(0))
    if len(node) < (k + 1) * cores:
        raise SystemExit(f"--busy {k} needs {(k + 1) * cores} cores; this node has {len(node)}")
    procs = []
    for j in range(1, k + 1):
        cpus = ",".join(map(str, node[j * cores:(j + 1) * cores]))
        procs.append(subprocess.Popen(
            ["taskset", "-c", cpus, sys.executable, "-m", "bench.speedup_repeatability",
             "--neighbour", ref], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True))  # its sandboxes too go with its process group
    time.sleep(5)  # their first gradings under way
    return procs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("n", nargs="?", type=int, default=10)
    parser.add_argument("refs", nargs="*", default=["treasure-hunt/t1-multiprocessing"])
    parser.add_argument("--busy", type=int, default=0, help="graders beside the measured one")
    parser.add_argument("--tenant", help="ON,OFF: spin on the last core ON s of every ON + OFF")
    parser.add_argument("--compare", action="store_true", help="probing off and on, in turn")
    parser.add_argument("--placement", action="store_true",
                        help="the baseline left to the kernel and placed "
                             "(runners/measure/placement.py), in turn")
    parser.add_argument("--retime", action="store_true",
                        help="grade a grading marked unreliable once more, as the server does")
    parser.add_argument("--anchor", action="store_true",
                        help="the plain ratio to the baseline and the figure anchored to the "
                             "reference (runners/measure/anchor.py), in turn")
    parser.add_argument("--reference-speedup", type=float,
                        help="the reference's speedup to anchor to (default: measured first)")
    parser.add_argument("--file", type=Path, help="grade this file instead of the reference")
    parser.add_argument("--neighbour", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    probes = (False, True) if opts.compare else (True,)
    placements = (False, True) if opts.placement else (True,)
    anchors = (False, True) if opts.anchor else (False,)
    on, off = (float(x) for x in opts.tenant.split(",")) if opts.tenant else (0.0, 0.0)
    if opts.neighbour:
        while True:
            gradings(opts.neighbour, 1)
    rows, table = [], []
    for ref in opts.refs:
        cores = _load(ref).manifest.resources.cores
        node = sorted(os.sched_getaffinity(0))
        confine(set(node[:cores]))  # this grader's slice (its BLAS threads too): the first cores
        try:
            with tenant(node[cores - 1] if opts.tenant else None, on, off):
                s_ref = opts.reference_speedup
                if opts.anchor and s_ref is None:
                    s_ref = measure_reference(ref)
                idle = gradings(ref, opts.n, probes, opts.retime, placements, anchors, s_ref,
                                opts.file)
            rows += idle
            label = f"tenant {on:g} s of {on + off:g} s" if opts.tenant else "idle"
            for p in probes:
                for q in placements:
                    for x in anchors:
                        where = f", baseline {'placed' if q else 'left to the kernel'}"
                        how = f", {'anchored to ' + format(s_ref, '.3f') if x else 'plain'}"
                        table.append(summary(
                            ref, [r for r in idle if (r["probe"], r["placed"], r["anchor_mode"])
                                  == (p, q, x)],
                            f"{label}, probe {'on' if p else 'off'}{where if opts.placement else ''}"
                            f"{how if opts.anchor else ''}"))
            inside = [r["plain"] for r in idle if r["anchored"]]
            if len(inside) > 1:
                print(f"{ref}: the anchored gradings' own ratio to the baseline: median "
                      f"{statistics.median(inside):.3f}, CV {cv(inside):.1%}")
            if opts.busy:
                procs = neighbours(ref, opts.busy, cores)
                try:
                    busy = gradings(ref, opts.n)
                finally:
                    for proc in procs:
                        os.killpg(proc.pid, signal.SIGKILL)
                        proc.wait()
                rows += [{**r, "package": f"{ref} (busy)"} for r in busy]
                table.append(summary(ref, busy, f"{opts.busy} neighbours"))
        finally:
            confine(set(node))
    publish("speedup_repeatability", table, {
        "package": "package", "mode": "node", "gradings": "gradings",
        "median": "median speedup %.3f", "cv_speedup": "CV speedup %.1%",
        "points": "points", "points_off": "largest distance from the median points %.1f",
        "coverage": "CI holds another's median %.0%", "short": "windows short %.0%",
        "unreliable": "marked unreliable", "retimed": "re-timed", "wall": "grading s %.1f"},
        extra={"gradings": rows})


if __name__ == "__main__":
    main()
