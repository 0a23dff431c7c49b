"""Final runs of an assignment (the course's staff): start, watch, cancel, repeat."""

from __future__ import annotations

from fastapi import APIRouter, status
from sqlalchemy.orm import Session

from server.api import RowId
from server.db import committing
from server.deps import CourseStaffDep, SessionDep, SettingsDep
from server.models import FinalRun
from server.schemas import (
    ErrorPublic,
    FinalGradePublic,
    FinalRunCreate,
    FinalRunPublic,
    FinalTurnPublic,
)
from server.services.grades import finals
from server.services.packages import assignments as assignment_service

router = APIRouter(prefix="/api/courses", tags=["final runs"],
                   responses={401: {"model": ErrorPublic}, 403: {"model": ErrorPublic},
                              404: {"model": ErrorPublic}, 409: {"model": ErrorPublic},
                              422: {"model": ErrorPublic}})


def run_public(session: Session, run: FinalRun, *, with_grades: bool) -> FinalRunPublic:
    p = finals.progress(session=session, run=run)
    out = FinalRunPublic(id=run.id, status=run.status, automatic=run.automatic,
                         rounds=run.rounds, turns=p.turns, done=p.done, failed=p.failed,
                         runner_seconds=p.runner_seconds, busy=p.busy, busy_until=run.busy_until,
                         created_at=run.created_at, finished_at=run.finished_at)
    if with_grades:
        out.turn_list = [FinalTurnPublic(email=email, round=t.round, status=t.status,
                                         node=finals.node_state(t), measured=t.measured,
                                         earned=t.earned)
                         for t, email in finals.turns(session=session, run=run)]
    if with_grades and run.status == "done":
        out.grades = [FinalGradePublic(email=email, alias=alias, submission_id=g.submission_id,
                                       speedup=g.speedup, low=g.range_low, high=g.range_high,
                                       score=g.score, live_score=live, turns=g.turns,
                                       node_busy=g.node_busy)
                      for g, email, alias, live in finals.standings(session=session, run=run)]
    return out


@router.post("/{course}/assignments/{slug}/final-runs", response_model=FinalRunPublic,
             status_code=status.HTTP_202_ACCEPTED)
def start(slug: str, body: FinalRunCreate, access: CourseStaffDep, session: SessionDep,
          settings: SettingsDep) -> FinalRunPublic:
    """Time every student's counted submission again, in rounds of a random order; once every
    turn is timed, the final points replace the provisional ones (a later run replaces an
    earlier one's)."""
    with committing(session):
        a = assignment_service.get(session=session, course=access.course, slug=slug)
        run = finals.start(session=session, assignment=a, actor=access.user, role=access.role,
                           rounds=body.rounds, busy_wait_s=settings.final_busy_wait_s)
        return run_public(session, run, with_grades=False)


@router.get("/{course}/assignments/{slug}/final-runs", response_model=list[FinalRunPublic])
def runs(slug: str, access: CourseStaffDep, session: SessionDep) -> list[FinalRunPublic]:
    """The assignment's final runs, newest first, with their progress."""
    a = assignment_service.get(session=session, course=access.course, slug=slug)
    return [run_public(session, r, with_grades=False)
            for r in finals.of_assignment(session=session, assignment=a)]


@router.get("/{course}/assignments/{slug}/final-runs/{run_id}", response_model=FinalRunPublic)
def run(slug: str, run_id: RowId, access: CourseStaffDep, session: SessionDep) -> FinalRunPublic:
    """One run and, once done, each student's final figure and points beside the live ones."""
    a = assignment_service.get(session=session, course=access.course, slug=slug)
    return run_public(session, finals.get(session=session, assignment=a, run_id=run_id),
                      with_grades=True)


@router.post("/{course}/assignments/{slug}/final-runs/{run_id}/cancel",
             response_model=FinalRunPublic)
def cancel(slug: str, run_id: RowId, access: CourseStaffDep,
           session: SessionDep) -> FinalRunPublic:
    """Stop a running final run: its jobs end; the grades stand as they were."""
    with committing(session):
        a = assignment_service.get(session=session, course=access.course, slug=slug)
        r = finals.get(session=session, assignment=a, run_id=run_id)
        finals.cancel(session=session, run=r, actor=access.user, role=access.role)
        return run_public(session, r, with_grades=False)
