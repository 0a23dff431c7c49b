"""Instructor pages: speedups the credit policy held or refused, with grant and refuse."""

from __future__ import annotations

import functools
from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, Response

from server.api import RowId
from server.deps import SessionDep
from server.services.grades import reviews as review_service
from server.services.grades.reviews import Decision
from server.services.packages import assignments as assignment_service
from server.web.admin import course_for
from server.web.plumbing import Csrf, PageUser, act_on_submission, render

router = APIRouter(include_in_schema=False)


@router.get("/c/{course}/{slug}/reviews")
def reviews_page(course: str, slug: str, request: Request, session: SessionDep,
                 user: PageUser) -> HTMLResponse:
    c, role = course_for(session, user, course, staff=True)
    a = assignment_service.get(session=session, course=c, slug=slug)
    return render(request, "reviews.html", user=user, course=c, a=a,
                  instructor=role == "instructor",
                  items=review_service.of_assignment(session=session, assignment=a))


@router.post("/s/{submission_id}/review", dependencies=[Csrf])
def review(submission_id: RowId, session: SessionDep, user: PageUser,
           decision: Annotated[Decision, Form()]) -> Response:
    """Grant a held or refused speedup its performance points, or refuse them."""
    return act_on_submission(submission_id, session, user,
                             functools.partial(review_service.decide, decision=decision))
