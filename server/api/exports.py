"""Grade exports for instructors."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse

from runners.protocol import Manifest
from server.api import RowId
from server.deps import CourseStaffDep, CurrentUser, SessionDep
from server.schemas import ErrorPublic
from server.services.grades import exports as export_service
from server.services.grades import grading
from server.services.intake import submissions as submission_service
from server.services.packages import assignments as assignment_service
from server.services.people import courses as course_service
from server.services.records import final_grades, manual_points
from server.services.records.errors import Forbidden, NotFound

router = APIRouter(prefix="/api", tags=["exports"],
                   responses={401: {"model": ErrorPublic}, 403: {"model": ErrorPublic},
                              404: {"model": ErrorPublic}, 422: {"model": ErrorPublic}})


@router.get("/courses/{course}/assignments/{slug}/grades.csv",
            responses={200: {"content": {"text/csv": {}}}})
def grades_csv(slug: str, access: CourseStaffDep, session: SessionDep) -> Response:
    """Best score per student (CSV)."""
    a = assignment_service.get(session=session, course=access.course, slug=slug)
    return Response(export_service.assignment_csv(session=session, assignment=a),
                    media_type="text/csv", headers={
                        "Content-Disposition": f'attachment; filename="{a.slug}-grades.csv"'})


@router.get("/submissions/{submission_id}/gradescope.json", response_class=JSONResponse)
def gradescope(submission_id: RowId, session: SessionDep, user: CurrentUser) -> JSONResponse:
    """Gradescope-compatible results.json of a graded submission (instructors), as a download."""
    # Someone else's submission answers like an unknown id (404): ids are not confirmed to exist.
    sub = submission_service.get_visible(session=session, user=user, submission_id=submission_id)
    if not course_service.is_staff(course_service.role(session=session, user=user,
                                                        course=sub.assignment.course)):
        raise Forbidden("the course's staff only")  # its owner, who knows it exists
    row = grading.report_of(session=session, submission_id=sub.id)
    if row is None:
        raise NotFound("this submission has no report yet")
    a = sub.assignment
    by_hand = manual_points.released_points(session=session, assignment=a, user_id=sub.user_id,
                                            submission_id=sub.id)
    body = export_service.gradescope(
        report=row.report, score=row.score, manifest=Manifest.model_validate(sub.version.manifest),
        final=final_grades.settled(session=session, sub=sub),
        manual=(by_hand[sub.user_id], manual_points.max_points(a)) if sub.user_id in by_hand
        else None)
    return JSONResponse(body, headers={  # the name is the server's: ids only
        "Content-Disposition": f'attachment; filename="results-{sub.id}.json"'})
