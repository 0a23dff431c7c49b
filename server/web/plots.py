"""Strong-scaling plots drawn as SVG on the server (no plotting library, no script, no CDN)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any
from xml.sax.saxutils import escape

W, H = 420, 260
LEFT, RIGHT, TOP, BOTTOM = 48, 52, 16, 40


def _axes(aria: str, left_ticks: Sequence[tuple[float, str]], workers: Sequence[int],
          x: Callable[[float], float], x_label: str) -> list[str]:
    """The opening of a plot: frame, left-axis ticks with grid lines, worker ticks, x label.
    `left_ticks` holds (y position, text) pairs."""
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" role="img" '
           f'class="plot" aria-label="{escape(aria)}">',
           f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" class="frame"/>']
    for at, text in left_ticks:
        out.append(f'<text x="{LEFT - 6}" y="{at + 4:.1f}" class="tick" text-anchor="end">'
                   f'{text}</text>')
        out.append(f'<line x1="{LEFT}" x2="{LEFT + pw}" y1="{at:.1f}" y2="{at:.1f}" '
                   'class="grid"/>')
    for w in workers:
        out.append(f'<text x="{x(w):.1f}" y="{TOP + ph + 16}" class="tick" '
                   f'text-anchor="middle">{int(w)}</text>')
    out.append(f'<text x="{LEFT + pw / 2}" y="{H - 6}" class="label" text-anchor="middle">'
               f'{escape(x_label)}</text>')
    return out


def scaling_svg(points: Sequence[dict[str, Any]], *, band: str = "95 % CI") -> str:
    """Speedup (with its 95 % CI, or the `band` its ci_low/ci_high are) and efficiency against
    workers, beside the ideal line.

    Speedup reads on the left axis, efficiency (0–100 %) on the right one. Every number comes
    from the report; text is escaped although none of it is free text.
    """
    pts = sorted((p for p in points if p.get("workers")), key=lambda p: p["workers"])
    if not pts:
        return ""
    max_w = float(max(p["workers"] for p in pts))
    y_max = float(max([max_w, *(p["ci_high"] for p in pts), *(p["speedup"] for p in pts)])) * 1.1
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def x(w: float) -> float:
        return LEFT + (w - 1) / max(max_w - 1, 1) * pw if max_w > 1 else LEFT + pw / 2

    def y(s: float) -> float:
        return TOP + ph - s / y_max * ph

    def y_eff(e: float) -> float:
        return TOP + ph - min(max(e, 0.0), 1.2) / 1.2 * ph

    out = _axes("strong scaling: speedup and efficiency against workers",
                [(y(y_max * i / 4), f"{y_max * i / 4:.1f}") for i in range(5)],
                [p["workers"] for p in pts], x, "workers")
    for e in (0.0, 0.5, 1.0):  # right axis: efficiency
        out.append(f'<text x="{LEFT + pw + 6}" y="{y_eff(e) + 4:.1f}" class="tick eff">'
                   f'{e:.0%}</text>')
    out.append(f'<line x1="{x(1):.1f}" y1="{y(1):.1f}" x2="{x(max_w):.1f}" y2="{y(max_w):.1f}" '
               'class="ideal"><title>ideal: speedup = workers</title></line>')
    speed = " ".join(f"{x(p['workers']):.1f},{y(p['speedup']):.1f}" for p in pts)
    eff = " ".join(f"{x(p['workers']):.1f},{y_eff(p['efficiency']):.1f}" for p in pts)
    out.append(f'<polyline points="{speed}" class="speedup"/>')
    out.append(f'<polyline points="{eff}" class="efficiency"/>')
    for p in pts:
        cx = x(p["workers"])
        out.append(f'<line x1="{cx:.1f}" x2="{cx:.1f}" y1="{y(p["ci_low"]):.1f}" '
                   f'y2="{y(p["ci_high"]):.1f}" class="ci"/>')
        tip = escape(f"{p['workers']} workers: speedup {p['speedup']:.2f} "
                     f"({band} {p['ci_low']:.2f}–{p['ci_high']:.2f}), "
                     f"efficiency {p['efficiency']:.0%}")
        out.append(f'<circle cx="{cx:.1f}" cy="{y(p["speedup"]):.1f}" r="4" class="speedup">'
                   f'<title>{tip}</title></circle>')
        out.append(f'<rect x="{cx - 3:.1f}" y="{y_eff(p["efficiency"]) - 3:.1f}" width="6" '
                   'height="6" class="efficiency"/>')
    out.append("</svg>")
    return "\n".join(out)


def weak_svg(points: Sequence[dict[str, Any]]) -> str:
    """Weak-scaling efficiency (with its 95 % CI) against workers; the ideal is 100 % throughout,
    the one-worker run of the one-worker size being the reference point."""
    pts = [{"workers": 1, "efficiency": 1.0, "ci_low": 1.0, "ci_high": 1.0}, *sorted(
        (p for p in points if p.get("workers", 0) > 1), key=lambda p: p["workers"])]
    if len(pts) < 2:
        return ""
    max_w = float(pts[-1]["workers"])
    top = float(max(1.2, *(p["ci_high"] for p in pts))) * 1.05
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def x(w: float) -> float:
        return LEFT + (w - 1) / (max_w - 1) * pw

    def y(e: float) -> float:
        return TOP + ph - min(max(e, 0.0), top) / top * ph

    out = _axes("weak scaling: efficiency against workers",
                [(y(e), f"{e:.0%}") for e in (0.0, 0.25, 0.5, 0.75, 1.0)],
                [p["workers"] for p in pts], x, "workers (problem size ∝ workers)")
    out.append(f'<line x1="{x(1):.1f}" y1="{y(1):.1f}" x2="{x(max_w):.1f}" y2="{y(1):.1f}" '
               'class="ideal"><title>ideal: efficiency 100 %</title></line>')
    line = " ".join(f"{x(p['workers']):.1f},{y(p['efficiency']):.1f}" for p in pts)
    out.append(f'<polyline points="{line}" class="efficiency"/>')
    for p in pts:
        cx = x(p["workers"])
        out.append(f'<line x1="{cx:.1f}" x2="{cx:.1f}" y1="{y(p["ci_low"]):.1f}" '
                   f'y2="{y(p["ci_high"]):.1f}" class="ci"/>')
        tip = escape(f"{p['workers']} workers: efficiency {p['efficiency']:.0%} "
                     f"(95 % CI {p['ci_low']:.0%}–{p['ci_high']:.0%})")
        out.append(f'<circle cx="{cx:.1f}" cy="{y(p["efficiency"]):.1f}" r="4" '
                   f'class="efficiency"><title>{tip}</title></circle>')
    out.append("</svg>")
    return "\n".join(out)


def bars_svg(bins: Sequence[tuple[float, float, int]], *, aria: str, x_label: str,
             marks: Sequence[tuple[float, str]] = (), log: bool = False,
             tick: Callable[[float], str] = lambda v: f"{v:g}") -> str:
    """Counts as bars over (from, to) intervals of a value, with vertical marks (a reference, a
    deadline) at values on the same axis; `log`: the value axis is logarithmic (speedups)."""
    if not bins:
        return ""
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM
    lo = min(b[0] for b in bins)
    hi = max(b[1] for b in bins)
    f = math.log if log else (lambda v: v)
    span = (f(hi) - f(lo)) or 1.0

    def x(v: float) -> float:
        return LEFT + (f(min(max(v, lo), hi)) - f(lo)) / span * pw

    top = max(1, max(n for *_, n in bins))
    step = max(1, math.ceil(top / 4))
    ticks = [(TOP + ph - k / top * ph, f"{k}") for k in range(0, top + 1, step)]
    out = _axes(aria, ticks, [], x, x_label)
    edges = sorted({b[0] for b in bins} | {bins[-1][1]})
    every = max(1, len(edges) // 6)
    for v in edges[::every]:
        out.append(f'<text x="{x(v):.1f}" y="{TOP + ph + 16}" class="tick" '
                   f'text-anchor="middle">{escape(tick(v))}</text>')
    for a, b, n in bins:
        if n:
            h = n / top * ph
            out.append(f'<rect x="{x(a) + 1:.1f}" y="{TOP + ph - h:.1f}" '
                       f'width="{max(1.0, x(b) - x(a) - 2):.1f}" height="{h:.1f}" class="bar">'
                       f'<title>{escape(f"{tick(a)} to {tick(b)}: {n}")}</title></rect>')
    for v, label in marks:
        out.append(f'<line x1="{x(v):.1f}" x2="{x(v):.1f}" y1="{TOP}" y2="{TOP + ph}" '
                   f'class="mark"><title>{escape(label)}</title></line>')
        out.append(f'<text x="{x(v) + 3:.1f}" y="{TOP + 11}" class="tick">{escape(label)}</text>')
    out.append("</svg>")
    return "\n".join(out)


STATE_CLASS = {"run": "prof-run", "wait": "prof-wait", "mpi": "prof-mpi"}


def timeline_svg(processes: Sequence[dict[str, Any]], seconds: float) -> str:
    """A profile's timeline: one row per process, running, waiting and in-MPI stretches along
    the call (runners/measure/profile.py). The labels are the platform's own ("process N");
    numbers come from the report, so nothing needs more than escaping."""
    width, row, left = 640, 22, 90
    span = max(seconds, max((seg[1] for p in processes for seg in p.get("timeline", [])),
                            default=0.0), 1e-3)
    height = row * len(processes) + 34
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" role="img" '
           'class="plot timeline" aria-label="where each process spent the call: running, '
           'waiting or in MPI">']
    scale = (width - left - 10) / span
    for i, p in enumerate(processes):
        y = 6 + i * row
        out.append(f'<text x="{left - 6}" y="{y + 13}" class="tick" text-anchor="end">'
                   f'{escape(str(p.get("label", "")))}</text>')
        for start, end, state in p.get("timeline", []):
            out.append(f'<rect x="{left + start * scale:.1f}" y="{y}" '
                       f'width="{max((end - start) * scale, 0.5):.1f}" height="{row - 6}" '
                       f'class="{STATE_CLASS.get(state, "prof-wait")}"><title>{escape(state)} '
                       f'{start:.2f}–{end:.2f} s</title></rect>')
    y = 6 + len(processes) * row + 14
    out.append(f'<text x="{left}" y="{y}" class="tick">0 s</text>')
    out.append(f'<text x="{width - 10}" y="{y}" class="tick" text-anchor="end">'
               f'{span:.2f} s</text>')
    out.append("</svg>")
    return "".join(out)


FLAME_ROW, FLAME_WIDTH, FLAME_DEPTH = 17, 640, 24


def flame_svg(stacks: Sequence[dict[str, Any]]) -> str:
    """A profile's flame graph: the call's stacks merged into a tree, outermost frame at the
    bottom, each frame as wide as the samples under it (runners/measure/profile.py). Frame
    names came from the student's processes: they are only escaped text."""
    root: dict[str, Any] = {"children": {}, "samples": 0}
    for stack in stacks:
        k = int(stack.get("samples", 0))
        node = root
        node["samples"] += k
        own = list(stack.get("own", []))
        for i, name in enumerate(list(stack.get("frames", []))[:FLAME_DEPTH]):
            node = node["children"].setdefault(str(name), {
                "children": {}, "samples": 0, "own": bool(own[i]) if i < len(own) else False})
            node["samples"] += k
    total = root["samples"] or 1
    depth = _depth(root)
    height = FLAME_ROW * depth + 4
    scale = FLAME_WIDTH / total
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {FLAME_WIDTH} {height}" '
           'role="img" class="plot flame" aria-label="flame graph: the call\'s stacks, each '
           'frame as wide as its share of the samples">']

    def draw(node: dict[str, Any], x: float, level: int) -> None:
        for name, child in sorted(node["children"].items(), key=lambda kv: -kv[1]["samples"]):
            w = child["samples"] * scale
            if w >= 1:
                y = height - FLAME_ROW * (level + 1)
                share = child["samples"] / total
                cls = "flame-own" if child["own"] else "flame-lib"
                out.append(f'<g><title>{escape(name)}: {share:.0%} of the samples</title>'
                           f'<rect x="{x:.1f}" y="{y}" width="{w - 0.5:.1f}" '
                           f'height="{FLAME_ROW - 1}" class="{cls}"/>')
                fits = int(w / 6.5)
                if fits >= 3:
                    text = name if len(name) <= fits else name[: fits - 1] + "…"
                    out.append(f'<text x="{x + 3:.1f}" y="{y + 12}" class="tick">'
                               f'{escape(text)}</text>')
                out.append("</g>")
                draw(child, x, level + 1)
            x += w

    draw(root, 0.0, 0)
    out.append("</svg>")
    return "".join(out)


def _depth(node: dict[str, Any]) -> int:
    return 1 + max((_depth(c) for c in node["children"].values()), default=0) \
        if node["children"] else 0


def profile_pictures(report: dict[str, Any] | None) -> dict[str, str]:
    """A report's profile as the pages draw it: its timeline and its flame graph ('' where
    there is none)."""
    prof = (report or {}).get("profile") or {}
    return {"timeline": timeline_svg(prof["processes"], prof.get("seconds", 0.0))
            if prof.get("processes") else "",
            "flame": flame_svg(prof["flame"]) if prof.get("flame") else ""}
