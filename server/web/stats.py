"""Staff pages: how the class is doing on an assignment (services/grades/statistics.py), with plots
drawn on the server and a table beside each."""

from __future__ import annotations

import math

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from markupsafe import Markup

from server.deps import SessionDep
from server.models import now
from server.services.grades import course_statistics as course_stats_service
from server.services.grades import statistics as stats_service
from server.services.packages import assignments as assignment_service
from server.web.admin import course_for
from server.web.plots import bars_svg, scaling_svg
from server.web.plumbing import PageUser, render

router = APIRouter(include_in_schema=False)


def _speedup_bins(values: list[float]) -> list[tuple[float, float, int]]:
    """Bins of equal width on a log axis from 0.5× (or lower) to the highest speedup."""
    if not values:
        return []
    lo, hi = min(0.5, min(values)), max(2.0, max(values)) * 1.05
    k = 12
    edges = [lo * (hi / lo) ** (i / k) for i in range(k + 1)]
    return [(edges[i], edges[i + 1], sum(1 for v in values if edges[i] <= v < edges[i + 1]
                                         or (i == k - 1 and v == edges[-1])))
            for i in range(k)]


def plots(st: stats_service.AssignmentStats) -> dict[str, Markup]:
    out = {}
    if st.max_score:
        bins = stats_service.histogram([s.best for s in st.students if s.best is not None],
                                       0.0, st.max_score)
        out["scores"] = Markup(bars_svg(bins, aria="best score per student", x_label="best score"))
    marks = [(v, label) for v, label in ((st.reference_speedup, "reference"),
                                         (st.speedup_min, "no points below"),
                                         (st.speedup_full, "full points")) if v]
    if st.speedups:
        out["speedups"] = Markup(bars_svg(
            _speedup_bins(st.speedups), aria="measured speedup of each student's best passed "
            "submission, log axis", x_label="speedup (log axis)", marks=marks, log=True,
            tick=lambda v: f"{v:.2g}×"))
    if st.scaling:
        out["scaling"] = Markup(scaling_svg(
            [{"workers": p.workers, "speedup": p.median, "ci_low": p.low, "ci_high": p.high,
              "efficiency": p.median / p.workers} for p in st.scaling],
            band="the class's middle half"))
    if span := stats_service.window(st):
        first = span[0]
        hours = max(1, math.ceil((span[1] - first).total_seconds() / 3600))
        counts = dict(((h - first).total_seconds() // 3600, n) for h, n in st.per_hour)
        bins = [(float(i), float(i + 1), int(counts.get(i, 0))) for i in range(hours)]
        dl = [((st.deadline - first).total_seconds() / 3600, "deadline")] if st.deadline else []
        out["hours"] = Markup(bars_svg(
            bins, aria="submissions per hour", marks=dl, tick=lambda v: f"{v:g} h",
            x_label=f"hours from {first:%Y-%m-%d %H:00} UTC"))
    return out


@router.get("/c/{course}/-/stats")
def course_stats_page(course: str, request: Request, session: SessionDep,
                      user: PageUser) -> HTMLResponse:
    c, _ = course_for(session, user, course, staff=True)
    st = course_stats_service.of_course(session=session, course_id=c.id, at=now())
    return render(request, "course_stats.html", user=user, course=c, st=st)


@router.get("/c/{course}/{slug}/stats")
def stats_page(course: str, slug: str, request: Request, session: SessionDep,
               user: PageUser) -> HTMLResponse:
    c, _ = course_for(session, user, course, staff=True)
    a = assignment_service.get(session=session, course=c, slug=slug)
    st = stats_service.of_assignment(session=session, assignment=a)
    return render(request, "stats.html", user=user, course=c, a=a, st=st, plots=plots(st),
                  low=stats_service.LOW_DISCRIMINATION)

