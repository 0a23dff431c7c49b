"""Practice runs in the pages: "Try on the runner" beside Submit, and a run's page
(services/intake/practice.py: the public tests only, never graded)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, File, Form, Request, UploadFile
from fastapi.responses import HTMLResponse, Response
from markupsafe import Markup

from server.api import RowId
from server.deps import SessionDep, SettingsDep
from server.models import Assignment
from server.services.intake import practice as practice_service
from server.services.intake import submissions as submission_service
from server.services.people import courses as course_service
from server.web.pages import upload_action
from server.web.plots import profile_pictures
from server.web.plumbing import Csrf, PageUser, render

router = APIRouter(include_in_schema=False)


@router.post("/c/{course}/{slug}/practice", dependencies=[Csrf])
def start(course: str, slug: str, request: Request, session: SessionDep, settings: SettingsDep,
          user: PageUser, files: Annotated[list[UploadFile], File()],
          timed: Annotated[str, Form()] = "", profile: Annotated[str, Form()] = "") -> Response:
    def act(role: str | None, a: Assignment, uploads: list[tuple[str, bytes]],
            intake: submission_service.Intake) -> str:
        run, _ = practice_service.start(session=session, user=user, assignment=a, role=role,
                                        uploads=uploads, timed=timed == "on",
                                        profiled=profile == "on", intake=intake)
        return f"/p/{run.id}"
    return upload_action(request, session, settings, user, course, slug, files, act)


@router.get("/p/{run_id}")
def run_page(run_id: RowId, request: Request, session: SessionDep,
             user: PageUser) -> HTMLResponse:
    run = practice_service.get_visible(session=session, user=user, run_id=run_id)
    staff = course_service.is_staff(course_service.role(session=session, user=user,
                                                        course=run.assignment.course))
    pictures = profile_pictures(run.report)
    return render(request, "practice.html", user=user, run=run, a=run.assignment,
                  report=run.report, staff=staff,
                  timeline=Markup(pictures["timeline"]), flame=Markup(pictures["flame"]))
