"""How the class is doing on an assignment, for its staff: JSON, and CSV per student or per test."""

from __future__ import annotations

import csv
import io
from datetime import datetime
from typing import Literal

from fastapi import APIRouter, Query
from fastapi.responses import Response
from pydantic import BaseModel, Field

from server.deps import CourseStaffDep, SessionDep
from server.models import now
from server.schemas import ErrorPublic, UtcDatetime
from server.services.grades import course_statistics as course_stats_service
from server.services.grades import statistics as stats_service
from server.services.grades.exports import csv_cell
from server.services.packages import assignments as assignment_service

router = APIRouter(prefix="/api", tags=["statistics"],
                   responses={401: {"model": ErrorPublic}, 403: {"model": ErrorPublic},
                              404: {"model": ErrorPublic}, 422: {"model": ErrorPublic}})


class SummaryPublic(BaseModel):
    n: int
    mean: float | None
    median: float | None
    sd: float | None


class StudentStatPublic(BaseModel):
    name: str
    email: str
    alias: str
    submissions: int
    practice_runs: int = Field(default=0, description="Practice runs (never graded, in no score)")
    best_score: float | None
    latest_score: float | None
    passed: bool = Field(description="Any submission passed every test")
    full_points: bool
    first_submitted_at: UtcDatetime | None
    first_passed_at: UtcDatetime | None


class FailurePublic(BaseModel):
    message: str = Field(description="The failure's first line, numbers and paths taken out")
    count: int
    example_submission_id: int


class TestStatPublic(BaseModel):
    name: str
    hidden: bool
    first_try_passed: int
    first_try_total: int
    final_passed: int
    final_total: int
    discrimination: float | None = Field(description=(
        "Correlation of passing this test with the final score, over final submissions; "
        "None where everyone passed or everyone failed it"))
    flagged: bool = Field(description="Discrimination under 0.1: a test to look at")
    failures: list[FailurePublic]


class ScalingPointPublic(BaseModel):
    workers: int
    median_speedup: float
    students: int = Field(description="Board submissions measured at this worker count")
    quartile_low: float
    quartile_high: float


class DayPublic(BaseModel):
    day: UtcDatetime = Field(description="The day (UTC) the gradings were queued")
    gradings: int
    queue_wait_p50_s: float
    queue_wait_p95_s: float
    grading_p50_s: float
    grading_p95_s: float


class AssignmentStatsPublic(BaseModel):
    enrolled: int
    submitted: int
    passed: int
    full_points: int
    not_started: list[str] = Field(description="Names of enrolled students with no submission")
    max_score: float | None
    best_score: SummaryPublic
    latest_score: SummaryPublic
    hours_to_first_pass: SummaryPublic = Field(description=(
        "Hours from a student's first submission to their first passing one"))
    tests: list[TestStatPublic] = Field(description="The class's weakest tests first")
    speedups: list[float] = Field(description="Each student's best passed submission's measured "
                                  "speedup")
    credited_speedups: list[float] = Field(
        description="The same submissions' credited speedups, what their performance points "
        "come from (0: none: held, refused), sorted")
    reference_speedup: float | None
    speedup_min: float | None
    speedup_full: float | None
    credit: dict[str, int] = Field(description="Final submissions by credit outcome")
    scaling: list[ScalingPointPublic] = Field(description=(
        "The class's median scaling curve over the board submissions"))
    submissions_per_hour: list[tuple[datetime, int]]
    per_day: list[DayPublic] = Field(description=(
        "Queue wait (queued to the claim of the attempt that finished) and grading time "
        "(that claim to its end), per day the gradings were queued, regrades included"))
    deadline: UtcDatetime | None
    students: list[StudentStatPublic]


def _summary(s: stats_service.Summary) -> SummaryPublic:
    return SummaryPublic(n=s.n, mean=s.mean, median=s.median, sd=s.sd)


def public(st: stats_service.AssignmentStats) -> AssignmentStatsPublic:
    return AssignmentStatsPublic(
        enrolled=st.enrolled, submitted=st.submitted, passed=st.passed, full_points=st.full,
        not_started=[s.name for s in st.not_started], max_score=st.max_score,
        best_score=_summary(st.best), latest_score=_summary(st.latest),
        hours_to_first_pass=_summary(st.hours_to_pass),
        tests=[TestStatPublic(
            name=t.name, hidden=t.hidden, first_try_passed=t.first_passed,
            first_try_total=t.first_total, final_passed=t.final_passed, final_total=t.final_total,
            discrimination=t.discrimination, flagged=t.flagged,
            failures=[FailurePublic(message=m, count=n, example_submission_id=sid)
                      for m, n, sid in t.failures]) for t in st.tests],
        speedups=st.speedups, credited_speedups=st.credited_speedups,
        reference_speedup=st.reference_speedup,
        speedup_min=st.speedup_min, speedup_full=st.speedup_full, credit=st.credit,
        scaling=[ScalingPointPublic(workers=p.workers, median_speedup=p.median,
                                    students=p.students, quartile_low=p.low,
                                    quartile_high=p.high) for p in st.scaling],
        submissions_per_hour=st.per_hour, deadline=st.deadline,
        per_day=[DayPublic(day=d.day, gradings=d.jobs, queue_wait_p50_s=d.wait_p50,
                           queue_wait_p95_s=d.wait_p95, grading_p50_s=d.run_p50,
                           grading_p95_s=d.run_p95) for d in st.days],
        students=[StudentStatPublic(
            name=s.name, email=s.email, alias=s.alias, submissions=s.submissions,
            practice_runs=s.practice_runs, best_score=s.best, latest_score=s.latest,
            passed=s.passed, full_points=s.full,
            first_submitted_at=s.first_at, first_passed_at=s.first_pass_at)
            for s in st.students])


def as_csv(st: stats_service.AssignmentStats, table: Literal["students", "tests"]) -> str:
    buf = io.StringIO()
    out = csv.writer(buf, quoting=csv.QUOTE_NONNUMERIC)
    if table == "students":
        out.writerow(["name", "email", "alias", "submissions", "best_score", "latest_score",
                      "passed", "full_points", "first_submitted_at", "first_passed_at",
                      "practice_runs"])
        for s in st.students:
            out.writerow([csv_cell(v) for v in (
                s.name, s.email, s.alias, s.submissions, "" if s.best is None else s.best,
                "" if s.latest is None else s.latest, "yes" if s.passed else "no",
                "yes" if s.full else "no", s.first_at.isoformat() if s.first_at else "",
                s.first_pass_at.isoformat() if s.first_pass_at else "", s.practice_runs)])
    else:
        out.writerow(["test", "hidden", "first_try_passed", "first_try_total", "final_passed",
                      "final_total", "discrimination", "commonest_failure", "its_count"])
        for t in st.tests:
            m, n = (t.failures[0][0], t.failures[0][1]) if t.failures else ("", "")
            out.writerow([csv_cell(v) for v in (
                t.name, "yes" if t.hidden else "no", t.first_passed, t.first_total,
                t.final_passed, t.final_total,
                "" if t.discrimination is None else round(t.discrimination, 3), m, n)])
    return buf.getvalue()


@router.get("/courses/{course}/assignments/{slug}/stats", response_model=AssignmentStatsPublic,
            responses={200: {"content": {"text/csv": {}}}})
def assignment_stats(slug: str, access: CourseStaffDep, session: SessionDep,
                     format: Literal["json", "csv"] = "json",
                     table: Literal["students", "tests"] = Query(
                         default="students", description="Which table a CSV holds")
                     ) -> AssignmentStatsPublic | Response:
    """The class on this assignment: who started and finished, scores, every test's pass rate
    (first try and final) with its commonest failures, speedups, credit outcomes, submissions
    per hour. `format=csv` gives one table (`table=students` or `tests`)."""
    a = assignment_service.get(session=session, course=access.course, slug=slug)
    st = stats_service.of_assignment(session=session, assignment=a)
    if format == "csv":
        return Response(as_csv(st, table), media_type="text/csv", headers={
            "Content-Disposition": f'attachment; filename="{access.course.slug}-{a.slug}-'
                                   f'{table}.csv"'})
    return public(st)


class AssignmentLinePublic(BaseModel):
    slug: str
    title: str
    deadline: UtcDatetime | None
    enrolled: int
    submitted: int
    passed: int
    median_best_score: float | None
    max_score: float | None
    teams: int | None = Field(default=None, description="Team work: its teams (null: individual)")


class WatchPublic(BaseModel):
    name: str
    alias: str
    email: str
    why: str


class CourseStatsPublic(BaseModel):
    assignments: list[AssignmentLinePublic]
    watchlist: list[WatchPublic] = Field(description=(
        "Students in no team of open team work, not started on an assignment due within 48 h, "
        "stuck (5 graded attempts, none passed) or falling (their latest assignment a quarter "
        "of the points below the rest)"))


@router.get("/courses/{course}/stats", response_model=CourseStatsPublic)
def course_stats(access: CourseStaffDep, session: SessionDep) -> CourseStatsPublic:
    """Each assignment's completion and median best score side by side, and the students to
    watch."""
    st = course_stats_service.of_course(session=session, course_id=access.course.id, at=now())
    return CourseStatsPublic(
        assignments=[AssignmentLinePublic(
            slug=a.slug, title=a.title, deadline=a.deadline, enrolled=a.enrolled,
            submitted=a.submitted, passed=a.passed, median_best_score=a.median_best,
            max_score=a.max_score, teams=a.teams) for a in st.assignments],
        watchlist=[WatchPublic(name=w.name, alias=w.alias, email=w.email, why=w.why)
                   for w in st.watchlist])
