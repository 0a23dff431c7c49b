"""Teams: students who hand in one solution per assignment together (services/people/teams.py)."""

from __future__ import annotations

from fastapi import APIRouter, status

from server.api import RowId
from server.db import committing
from server.deps import CourseDep, CourseInstructorDep, CourseStaffDep, SessionDep
from server.models import Team
from server.schemas import ErrorPublic, ExtensionCreate
from server.schemas_teams import (
    MemberPublic,
    TeamCreate,
    TeamJoin,
    TeamPlace,
    TeamPublic,
    TeamsCopy,
    TeamsImport,
)
from server.services.grades import extensions as extension_service
from server.services.packages import assignments as assignment_service
from server.services.people import courses as course_service
from server.services.people import teams as team_service
from server.services.records.errors import NotFound

router = APIRouter(prefix="/api", tags=["teams"],
                   responses={401: {"model": ErrorPublic}, 403: {"model": ErrorPublic},
                              404: {"model": ErrorPublic}, 409: {"model": ErrorPublic},
                              422: {"model": ErrorPublic}})
A = "/courses/{course}/assignments/{slug}"


def public(team: Team) -> TeamPublic:
    a = team.assignment
    return TeamPublic(
        id=team.id, name=team.name, join_code=team.join_code,
        members=[MemberPublic(name=m.user.name, email=m.user.email, joined_at=m.joined_at)
                 for m in team_service.members(team)],
        size=(a.team_min, a.team_max or 1), locked=team_service.locked(a),
        deadline=team.deadline)


@router.get(A + "/team", response_model=TeamPublic)
def mine(slug: str, access: CourseDep, session: SessionDep) -> TeamPublic:
    """Your team of the assignment (404: you are on your own)."""
    a = assignment_service.get(session=session, course=access.course, slug=slug)
    team = team_service.team_of(session=session, user_id=access.user.id, assignment_id=a.id)
    if team is None:
        raise NotFound("you are not in a team of this assignment")
    return public(team)


@router.post(A + "/team", response_model=TeamPublic, status_code=status.HTTP_201_CREATED)
def create(slug: str, body: TeamCreate, access: CourseDep, session: SessionDep) -> TeamPublic:
    """Create a team with you in it; classmates join with its join code."""
    a = assignment_service.get(session=session, course=access.course, slug=slug)
    with committing(session):
        team = team_service.create(session=session, user=access.user, assignment=a,
                                   role=access.role, name=body.name)
    return public(team)


@router.post(A + "/team/join", response_model=TeamPublic)
def join(slug: str, body: TeamJoin, access: CourseDep, session: SessionDep) -> TeamPublic:
    """Join the team whose join code a member gave you (409: it is full, or you are in one)."""
    a = assignment_service.get(session=session, course=access.course, slug=slug)
    with committing(session):
        team = team_service.join(session=session, user=access.user, assignment=a,
                                 role=access.role, code=body.code)
    return public(team)


@router.delete(A + "/team", status_code=status.HTTP_204_NO_CONTENT)
def leave(slug: str, access: CourseDep, session: SessionDep) -> None:
    """Leave your team: what it handed in while you were in it stays yours too; what it hands
    in after does not."""
    a = assignment_service.get(session=session, course=access.course, slug=slug)
    with committing(session):
        team_service.leave(session=session, user=access.user, assignment=a, role=access.role)


@router.get(A + "/teams", response_model=list[TeamPublic])
def every(slug: str, access: CourseStaffDep, session: SessionDep) -> list[TeamPublic]:
    """Every team of the assignment with its members (staff)."""
    a = assignment_service.get(session=session, course=access.course, slug=slug)
    return [public(t) for t in team_service.of_assignment(session=session, assignment=a)]


@router.put(A + "/teams", response_model=TeamPublic)
def place(slug: str, body: TeamPlace, access: CourseStaffDep, session: SessionDep) -> TeamPublic:
    """Put a student in a team (made if new), out of any other of the assignment (staff)."""
    a = assignment_service.get(session=session, course=access.course, slug=slug)
    student = course_service.student(session=session, course=access.course, email=body.email)
    with committing(session):
        team = team_service.place(session=session, actor=access.user, assignment=a,
                                  role=access.role, student=student, team_name=body.team)
    return public(team)


@router.put(A + "/teams/{team_id}/extension", response_model=TeamPublic)
def extend(slug: str, team_id: RowId, body: ExtensionCreate, access: CourseInstructorDep,
           session: SessionDep) -> TeamPublic:
    """Give a team its own deadline: what it hands in is late only after it (a member's
    personal extension holds only for what they hand in alone)."""
    a = assignment_service.get(session=session, course=access.course, slug=slug)
    with committing(session):
        team = extension_service.grant_team(session=session, actor=access.user, assignment=a,
                                            role=access.role, team_id=team_id,
                                            deadline=body.deadline, reason=body.reason)
    return public(team)


@router.delete(A + "/teams/{team_id}/extension", response_model=TeamPublic)
def unextend(slug: str, team_id: RowId, access: CourseInstructorDep,
             session: SessionDep) -> TeamPublic:
    """Take a team's extension back: the assignment's deadline holds for it again."""
    a = assignment_service.get(session=session, course=access.course, slug=slug)
    with committing(session):
        team = extension_service.grant_team(session=session, actor=access.user, assignment=a,
                                            role=access.role, team_id=team_id, deadline=None)
    return public(team)


@router.post(A + "/teams/import", response_model=list[TeamPublic])
def import_teams(slug: str, body: TeamsImport, access: CourseStaffDep,
                 session: SessionDep) -> list[TeamPublic]:
    """Teams from a CSV (email, team): every row placed, or none where one is wrong (staff)."""
    a = assignment_service.get(session=session, course=access.course, slug=slug)
    with committing(session):
        made = team_service.import_csv(session=session, actor=access.user, assignment=a,
                                       role=access.role, text=body.csv)
    return [public(t) for t in made]


@router.post(A + "/teams/random", response_model=list[TeamPublic])
def assign_at_random(slug: str, access: CourseStaffDep, session: SessionDep) -> list[TeamPublic]:
    """Every student in no team shuffled into new teams of the largest size (staff)."""
    a = assignment_service.get(session=session, course=access.course, slug=slug)
    with committing(session):
        made = team_service.assign_at_random(session=session, actor=access.user, assignment=a,
                                             role=access.role)
    return [public(t) for t in made]


@router.post(A + "/teams/copy", response_model=list[TeamPublic])
def copy_teams(slug: str, body: TeamsCopy, access: CourseStaffDep,
               session: SessionDep) -> list[TeamPublic]:
    """Another assignment's teams, as they stand, made again here (staff)."""
    a = assignment_service.get(session=session, course=access.course, slug=slug)
    source = assignment_service.get(session=session, course=access.course, slug=body.source)
    with committing(session):
        made = team_service.copy_from(session=session, actor=access.user, assignment=a,
                                      role=access.role, source=source)
    return [public(t) for t in made]
