"""Regrade requests over the API, for every course (services/by_hand/regrade_requests.py): a
student reads what they may ask about (their graded submission's tests, the whole rubric, the
performance points) and asks; the course's staff list the requests and answer them, applying or
taking off any rubric item, or queueing the submission to be graded again."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status

from server.api import RowId
from server.db import committing
from server.deps import CourseDep, CourseStaffDep, SessionDep
from server.models import Assignment, RegradeRequest
from server.schemas import ErrorPublic
from server.schemas_regrades import (
    ItemChoice,
    RegradeAnswerIn,
    RegradeChoicesPublic,
    RegradeRequestIn,
    RegradeRequestPublic,
    TestChoice,
)
from server.services.by_hand import regrade_requests
from server.services.packages import assignments as assignment_service
from server.services.records.errors import Forbidden

router = APIRouter(prefix="/api/courses", tags=["regrade requests"],
                   responses={401: {"model": ErrorPublic}, 403: {"model": ErrorPublic},
                              404: {"model": ErrorPublic}, 409: {"model": ErrorPublic},
                              422: {"model": ErrorPublic}})
A = "/{course}/assignments/{slug}"


def public(r: RegradeRequest, student: str | None = None,
           assignment: str | None = None) -> RegradeRequestPublic:
    """A request as its student or the course's staff read it."""
    return RegradeRequestPublic(
        id=r.id, student=student, assignment=assignment, submission_id=r.submission_id,
        subject=regrade_requests.subject(r), item_id=r.item_id, item_title=r.item_title,
        test_name=r.test_name, performance=r.performance, reason=r.reason, status=r.status,
        answer=r.answer, changed=r.changed, requeued=r.requeued, created_at=r.created_at,
        answered_at=r.answered_at)


def _assignment(access: CourseDep, session: SessionDep, slug: str) -> Assignment:
    return assignment_service.get(session=session, course=access.course, slug=slug)


@router.get(A + "/regrade-requests", response_model=RegradeChoicesPublic)
def choices(slug: str, access: CourseDep, session: SessionDep) -> RegradeChoicesPublic:
    """What you may ask about (your graded submission's tests, the whole rubric with what your
    released hand grade applied, the performance points) and your requests with their answers."""
    if access.role != "student":
        raise Forbidden("regrade requests are a student's; the course's staff read them at "
                        f"/api/courses/{access.course.slug}/regrade-requests")
    c = regrade_requests.choices(session=session, assignment=_assignment(access, session, slug),
                                 student=access.user)
    return RegradeChoicesPublic(
        submission_id=c.standing.submission.id if c.standing else None,
        tests=[TestChoice(name=n, outcome=o) for n, o in c.tests],
        items=[ItemChoice(id=i.id, group=i.group, title=i.title, description=i.description,
                          points=i.points, applied=on) for i, on in c.items],
        performance=c.performance, may_open=c.may_open,
        requests=[public(r) for r in c.requests])


@router.post(A + "/regrade-requests", response_model=RegradeRequestPublic,
             status_code=status.HTTP_201_CREATED)
@router.post(A + "/feedback/regrade-requests", response_model=RegradeRequestPublic,
             status_code=status.HTTP_201_CREATED, include_in_schema=False)
def ask(slug: str, body: RegradeRequestIn, access: CourseDep,
        session: SessionDep) -> RegradeRequestPublic:
    """Ask for a second look at one rubric item (`item_id`, applied or not), one test
    (`test_name`) or the performance points (`performance`) of the grade you can see."""
    with committing(session):
        r = regrade_requests.ask(session=session, assignment=_assignment(access, session, slug),
                                 student=access.user, role=access.role, reason=body.reason,
                                 item_id=body.item_id, test_name=body.test_name,
                                 performance=body.performance)
        return public(r)


@router.get("/{course}/regrade-requests", response_model=list[RegradeRequestPublic])
def of_course(access: CourseStaffDep, session: SessionDep,
              state: Annotated[str, Query(pattern="^(open|answered|all)$")] = "open"
              ) -> list[RegradeRequestPublic]:
    """The course's regrade requests, oldest first (open ones by default)."""
    found = regrade_requests.of_course(session=session, course=access.course, role=access.role,
                                       status=None if state == "all" else state)
    return [public(x.request, x.student, x.slug) for x in found]


@router.post("/{course}/regrade-requests/{request_id}/answer",
             response_model=RegradeRequestPublic)
def answer(request_id: RowId, body: RegradeAnswerIn, access: CourseStaffDep,
           session: SessionDep) -> RegradeRequestPublic:
    """Answer a request: `apply`/`remove` change any rubric item of the grade (`apply_item`, the
    one asked about), `regrade` queues the submission to be graded again; neither: the grade
    stays."""
    with committing(session):
        r = regrade_requests.get(session=session, course=access.course, request_id=request_id)
        regrade_requests.answer(session=session, request=r, actor=access.user, role=access.role,
                                text=body.answer, items=body.items(), apply_item=body.apply_item,
                                regrade=body.regrade)
        return public(r)
