"""A course's people: members and roles, the roster from the LMS, deadline extensions."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, File, Response, UploadFile, status

from server.db import committing
from server.deps import CourseInstructorDep, CourseStaffDep, SessionDep
from server.models import Extension
from server.schemas import (
    ErrorPublic,
    ExtensionCreate,
    ExtensionPublic,
    MemberPublic,
    RoleUpdate,
    RosterImportPublic,
    RosterRowPublic,
)
from server.services.grades import extensions as extension_service
from server.services.packages import assignments as assignment_service
from server.services.people import courses as course_service
from server.services.records.errors import TooLarge

router = APIRouter(prefix="/api/courses", tags=["members"],
                   responses={401: {"model": ErrorPublic}, 403: {"model": ErrorPublic},
                              404: {"model": ErrorPublic}, 422: {"model": ErrorPublic}})

@router.get("/{course}/members", response_model=list[MemberPublic])
def members(access: CourseStaffDep, session: SessionDep) -> list[MemberPublic]:
    """Everyone in the course by role, and the roster's emails without an account yet."""
    return [MemberPublic(email=m.email, name=m.name, alias=m.alias, role=m.role,
                         on_roster=m.on_roster, lms_email=m.lms_email)
            for m in course_service.members(session=session, course=access.course)]


@router.put("/{course}/members/{email}", response_model=MemberPublic,
            responses={409: {"model": ErrorPublic}})
def set_role(email: str, body: RoleUpdate, access: CourseInstructorDep,
             session: SessionDep) -> MemberPublic:
    """Make an account the course's instructor, TA or student (audit-logged); the course keeps
    at least one instructor."""
    with committing(session):
        e = course_service.set_role(session=session, actor=access.user, course=access.course,
                                    role=access.role, email=email, new_role=body.role)
        return MemberPublic(email=e.user.email, name=e.user.name, alias=e.alias, role=e.role,
                            on_roster=False)


@router.post("/{course}/roster", response_model=RosterImportPublic,
             responses={413: {"model": ErrorPublic}})
def import_roster(roster: Annotated[UploadFile, File(description="CSV exported by the LMS: "
                                                                 "email, name, optional alias")],
                  access: CourseInstructorDep, session: SessionDep) -> RosterImportPublic:
    """Put students on the course from a CSV (idempotent); each row says what became of it."""
    limit = course_service.MAX_ROSTER_BYTES
    data = roster.file.read(limit + 1)
    if len(data) > limit:
        raise TooLarge(f"roster larger than {limit} bytes")
    with committing(session):
        rows = course_service.import_roster(session=session, actor=access.user,
                                            course=access.course, role=access.role, data=data)
    return RosterImportPublic(counts=course_service.tally(rows), rows=[
        RosterRowPublic(line=r.line, email=r.email, outcome=r.outcome,  # type: ignore[arg-type]
                        detail=r.detail) for r in rows])


def _extension_public(x: Extension) -> ExtensionPublic:
    return ExtensionPublic(email=x.user.email, name=x.user.name, deadline=x.deadline,
                           reason=x.reason, granted_at=x.created_at)


@router.get("/{course}/assignments/{slug}/extensions", response_model=list[ExtensionPublic])
def extensions(slug: str, access: CourseStaffDep, session: SessionDep) -> list[ExtensionPublic]:
    """Every student's own deadline on this assignment."""
    a = assignment_service.get(session=session, course=access.course, slug=slug)
    return [_extension_public(x) for x in extension_service.of_assignment(session=session,
                                                                          assignment=a)]


@router.put("/{course}/assignments/{slug}/extensions/{email}", response_model=ExtensionPublic)
def grant_extension(slug: str, email: str, body: ExtensionCreate, access: CourseInstructorDep,
                    session: SessionDep) -> ExtensionPublic:
    """Give one student their own deadline (audit-logged); their submissions up to it are not
    late, and stored grades are re-scored."""
    with committing(session):
        a = assignment_service.get(session=session, course=access.course, slug=slug)
        x = extension_service.grant(session=session, actor=access.user, assignment=a,
                                    role=access.role, email=email, deadline=body.deadline,
                                    reason=body.reason)
        return _extension_public(x)


@router.delete("/{course}/assignments/{slug}/extensions/{email}",
               status_code=status.HTTP_204_NO_CONTENT)
def revoke_extension(slug: str, email: str, access: CourseInstructorDep,
                     session: SessionDep) -> Response:
    """Take an extension back (audit-logged): the assignment's deadline holds again."""
    with committing(session):
        a = assignment_service.get(session=session, course=access.course, slug=slug)
        extension_service.revoke(session=session, actor=access.user, assignment=a,
                                 role=access.role, email=email)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
