"""Instructor review of held and refused speedups."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter
from pydantic import BaseModel, Field

from server.api import RowId
from server.db import committing
from server.deps import CourseStaffDep, CurrentUser, SessionDep
from server.schemas import ErrorPublic
from server.services.grades import reviews as review_service
from server.services.intake import submissions as submission_service
from server.services.packages import assignments as assignment_service
from server.services.people import courses as course_service

router = APIRouter(prefix="/api", tags=["reviews"],
                   responses={401: {"model": ErrorPublic}, 403: {"model": ErrorPublic},
                              404: {"model": ErrorPublic}, 409: {"model": ErrorPublic},
                              422: {"model": ErrorPublic}})


class ReviewPublic(BaseModel):
    submission_id: int
    alias: str
    speedup: float | None = Field(description="The measured speedup")
    credit: str = Field(description="held | refused: what the credit policy made of it")
    reason: str = Field(description="The policy's reason, in one sentence with the figures")
    review: str | None = Field(description="granted | refused, or None while undecided")
    score: float


class ReviewDecision(BaseModel):
    decision: Literal["grant", "refuse"] = Field(
        description="grant: the measured speedup earns its performance points; refuse: it "
                    "earns none")


def _public(item: review_service.Item) -> ReviewPublic:
    return ReviewPublic(submission_id=item.submission.id, alias=item.alias,
                        speedup=item.row.speedup_median, credit=str(item.row.credit_status),
                        reason=item.reason, review=item.row.review, score=item.row.score)


@router.get("/courses/{course}/assignments/{slug}/reviews", response_model=list[ReviewPublic])
def reviews(slug: str, access: CourseStaffDep, session: SessionDep) -> list[ReviewPublic]:
    """Submissions whose speedup the credit policy held or refused, undecided first."""
    a = assignment_service.get(session=session, course=access.course, slug=slug)
    return [_public(i) for i in review_service.of_assignment(session=session, assignment=a)]


@router.post("/submissions/{submission_id}/review", response_model=ReviewPublic)
def review(submission_id: RowId, body: ReviewDecision, session: SessionDep,
           user: CurrentUser) -> ReviewPublic:
    """Grant a held or refused speedup its performance points, or refuse them (audit-logged)."""
    sub = submission_service.get_visible(session=session, user=user, submission_id=submission_id)
    with committing(session):
        role = course_service.role(session=session, user=user, course=sub.assignment.course)
        item = review_service.decide(session=session, actor=user, submission=sub, role=role,
                                     decision=body.decision)
        out = _public(item)
    return out
