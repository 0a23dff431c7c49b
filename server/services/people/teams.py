"""Teams: students who hand in one solution per assignment together (models/teams.py).

An assignment is team work where its `team_max` is set (above 1). A student is in at most one
team of an assignment at a time. Where `teams_by_students`, a student creates a team (its join
code is theirs to give) and classmates join with the code; the staff may always build teams.
From `team_lock_at` no membership changes. Every change is written to the audit log.

Seats and "one team each" are checked and taken under the student's own lock (`users.hold`,
the one an upload takes) and then the team's (`db.hold`), always in that order: two students
racing for a team's last seat get one seat between them.

What a submission shares is one rule, `shared`: the student's own solo submissions and those of
every team they were in when the submission was made.
"""

from __future__ import annotations

import csv
import io
import random
import secrets
from datetime import datetime

from sqlalchemy import ColumnElement, Subquery, and_, func, or_, select, union_all
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from runners.protocol import text as text_rule
from server import db
from server.models import Assignment, AuditLog, Submission, Team, TeamMember, User, aware, now
from server.services.people import courses, users
from server.services.records.errors import Conflict, Forbidden, Invalid, NotFound

NAME_MAX = 80


def team_work(assignment: Assignment) -> bool:
    return assignment.team_max is not None and assignment.team_max > 1


def locked(assignment: Assignment, at: datetime | None = None) -> bool:
    lock = aware(assignment.team_lock_at) if assignment.team_lock_at else None
    return lock is not None and (at or now()) >= lock


def membership(*, session: Session, user_id: int, assignment_id: int) -> TeamMember | None:
    """The student's current membership of a team of the assignment (None: on their own)."""
    return session.scalar(select(TeamMember).where(
        TeamMember.assignment_id == assignment_id, TeamMember.user_id == user_id,
        TeamMember.left_at.is_(None)))


def team_of(*, session: Session, user_id: int, assignment_id: int) -> Team | None:
    m = membership(session=session, user_id=user_id, assignment_id=assignment_id)
    return m.team if m is not None else None


def members(team: Team) -> list[TeamMember]:
    """The team's current members, in the order they joined."""
    return [m for m in team.memberships if m.left_at is None]


def _member_when_made() -> ColumnElement[bool]:
    """Over `Submission` and `TeamMember`: the member was in the submission's team when it was
    made (one who left keeps it; one who joined later does not get it)."""
    return and_(TeamMember.team_id == Submission.team_id,
                TeamMember.joined_at <= Submission.created_at,
                or_(TeamMember.left_at.is_(None), TeamMember.left_at > Submission.created_at))


def sharers() -> Subquery:
    """Every (submission `sid`, student `uid`) pair where the student shares the submission:
    the uploader of a solo one; each member of its team at the moment it was made. The one
    rule of who shares what (`_member_when_made`): reading, listing, the board and the grades
    all follow it; `shared` asks it of one student."""
    solo = select(Submission.id.label("sid"), Submission.user_id.label("uid")).where(
        Submission.team_id.is_(None))
    team = select(Submission.id.label("sid"), TeamMember.user_id.label("uid")).join(
        TeamMember, _member_when_made())
    return union_all(solo, team).subquery("sharers")


def shared(user_id: int) -> ColumnElement[bool]:
    """Over `Submission`: the submissions `user_id` shares (`sharers`' rule, asked of one
    student per row: their solo ones by the uploader's index, a team's by its membership)."""
    teams_of = select(TeamMember.team_id).where(TeamMember.user_id == user_id)
    member = select(TeamMember.id).where(_member_when_made(),
                                         TeamMember.user_id == user_id).exists()
    # Both sides reach submissions by an index (user_id; team_id among the student's teams),
    # then the membership's dates are checked on those rows only.
    return or_(and_(Submission.team_id.is_(None), Submission.user_id == user_id),
               and_(Submission.team_id.in_(teams_of), member))


def shares(*, session: Session, user_id: int, submission_id: int) -> bool:
    return session.scalar(select(Submission.id).where(
        Submission.id == submission_id, shared(user_id))) is not None


def sharers_of(*, session: Session, submission_id: int) -> list[int]:
    """The students who share the submission (its uploader, or its team's members then)."""
    pairs = sharers()
    return sorted(session.scalars(select(pairs.c.uid).where(pairs.c.sid == submission_id)))


def sharers_by_submission(*, session: Session, ids: set[int]) -> dict[int, set[int]]:
    """Who shares each of these submissions (two that share a student are a team's own)."""
    pairs = sharers()
    out: dict[int, set[int]] = {i: set() for i in ids}
    for sid, uid in session.execute(select(pairs.c.sid, pairs.c.uid).where(pairs.c.sid.in_(ids))):
        out[sid].add(uid)
    return out


def _changeable(assignment: Assignment, role: str | None, *, by_student: bool) -> None:
    if not team_work(assignment):
        raise Conflict("this assignment is individual work: it has no teams")
    staff = courses.is_staff(role)
    if role is None:
        raise Forbidden("you are not enrolled in this course")
    if by_student and not staff and not assignment.teams_by_students:
        raise Forbidden("the course's staff form this assignment's teams")
    if locked(assignment) and not staff:
        raise Conflict("the teams of this assignment are locked: membership no longer changes")


def _hold_student(session: Session, user_id: int, assignment: Assignment) -> None:
    if not users.hold(session=session, user_id=user_id):
        raise NotFound("no such student")
    if membership(session=session, user_id=user_id, assignment_id=assignment.id) is not None:
        raise Conflict("already in a team of this assignment: leave it first")


def _log(session: Session, actor: User, action: str, team: Team, **detail: object) -> None:
    a = team.assignment
    session.add(AuditLog(actor_id=actor.id, action=f"team.{action}",
                         target=f"{a.course.slug}/{a.slug}",
                         detail={"team": team.name, "team_id": team.id, **detail}))


def create(*, session: Session, user: User, assignment: Assignment, role: str | None,
           name: str) -> Team:
    """A new team of the assignment with `user` its first member (a student forming one)."""
    _changeable(assignment, role, by_student=True)
    name = " ".join(name.split())
    if not 0 < len(name) <= NAME_MAX:
        raise Invalid(f"a team's name is 1 to {NAME_MAX} characters")
    _hold_student(session, user.id, assignment)
    if session.scalar(select(Team.id).where(Team.assignment_id == assignment.id,
                                            func.lower(Team.name) == name.lower())):
        raise Conflict(f"a team of this assignment is already called {name!r}")
    team = _new_team(session, assignment, name)
    session.add(TeamMember(team_id=team.id, user_id=user.id, assignment_id=assignment.id))
    session.flush()
    _log(session, user, "create", team, member=user.email)
    return team


def join(*, session: Session, user: User, assignment: Assignment, role: str | None,
         code: str) -> Team:
    """`user` joins the team whose join code is `code`, where a seat is free."""
    _changeable(assignment, role, by_student=True)
    team = session.scalar(select(Team).where(Team.assignment_id == assignment.id,
                                             Team.join_code == code.strip()))
    if team is None:
        raise NotFound("no team of this assignment has this join code")
    _hold_student(session, user.id, assignment)
    _seat(session, team, user)
    _log(session, user, "join", team, member=user.email)
    return team


def _new_team(session: Session, assignment: Assignment, name: str) -> Team:
    """A new team of the assignment; a name another request took a moment ago is refused."""
    team = Team(assignment_id=assignment.id, name=name, join_code=secrets.token_urlsafe(9))
    try:
        with session.begin_nested():
            session.add(team)
    except IntegrityError as exc:
        raise Conflict(f"a team of this assignment is already called {name!r}") from exc
    return team


def _seat(session: Session, team: Team, user: User) -> None:
    """Add `user` to `team` under the team's lock (after the student's), where a seat is free."""
    db.hold(session, Team, team.id)
    session.refresh(team)
    size = len(members(team))
    top = team.assignment.team_max or 1
    if size >= top:
        raise Conflict(f"the team {team.name!r} is full ({size} of {top})")
    session.add(TeamMember(team_id=team.id, user_id=user.id, assignment_id=team.assignment_id))
    session.flush()
    session.refresh(team)


def leave(*, session: Session, user: User, assignment: Assignment, role: str | None) -> Team:
    """`user` leaves their team: what it handed in while they were in it stays theirs too."""
    _changeable(assignment, role, by_student=False)
    users.hold(session=session, user_id=user.id)
    m = membership(session=session, user_id=user.id, assignment_id=assignment.id)
    if m is None:
        raise NotFound("you are not in a team of this assignment")
    m.left_at = now()
    session.flush()
    _log(session, user, "leave", m.team, member=user.email)
    return m.team


def place(*, session: Session, actor: User, assignment: Assignment, role: str | None,
          student: User, team_name: str) -> Team:
    """The staff put `student` in the team called `team_name` (made if there is none), taking
    them out of any other team of the assignment first."""
    if not courses.is_staff(role):
        raise Forbidden("only the course's staff place students in teams")
    _changeable(assignment, role, by_student=False)
    team_name = " ".join(team_name.split())
    if not 0 < len(team_name) <= NAME_MAX:
        raise Invalid(f"a team's name is 1 to {NAME_MAX} characters")
    if courses.role(session=session, user=student, course=assignment.course) != "student":
        raise Invalid(f"{student.email} is not a student of this course")
    users.hold(session=session, user_id=student.id)
    current = membership(session=session, user_id=student.id, assignment_id=assignment.id)
    if current is not None and current.team.name == team_name:
        return current.team
    team = session.scalar(select(Team).where(Team.assignment_id == assignment.id,
                                             Team.name == team_name))
    if team is None:
        team = _new_team(session, assignment, team_name[:NAME_MAX])
    if current is not None:
        current.left_at = now()
        session.flush()
    _seat(session, team, student)
    _log(session, actor, "place", team, member=student.email)
    return team


def of_assignment(*, session: Session, assignment: Assignment) -> list[Team]:
    return list(session.scalars(select(Team).where(Team.assignment_id == assignment.id)
                                .order_by(Team.name)))


def for_upload(*, session: Session, user: User, assignment: Assignment,
               staff: bool) -> Team | None:
    """The team an upload of `user`'s is handed in for, held until the transaction ends (its
    quota is the team's); None for individual work or staff. A team-work assignment of at
    least two takes no upload from a student on their own."""
    if not team_work(assignment) or staff:
        return None
    team = team_of(session=session, user_id=user.id, assignment_id=assignment.id)
    if team is None:
        if assignment.team_min > 1:
            raise Conflict(f"this assignment is team work ({assignment.team_min} to "
                           f"{assignment.team_max} students): create or join a team first")
        return None
    db.hold(session, Team, team.id)
    session.refresh(team)
    if (size := len(members(team))) < assignment.team_min:
        raise Conflict(f"your team has {size} member{'s' * (size != 1)}; this assignment is for "
                       f"teams of {assignment.team_min} to {assignment.team_max}: give a "
                       "classmate your team's join code")
    return team


def import_csv(*, session: Session, actor: User, assignment: Assignment, role: str | None,
               text: str) -> list[Team]:
    """Teams from a CSV with columns `email` and `team`: each student placed in the team named
    (made if new); a row that names no student of the course refuses the whole file, saying
    which (nothing is stored)."""
    if not courses.is_staff(role):
        raise Forbidden("only the course's staff build teams")
    if (why := text_rule.paragraphs_problem(text, "the teams CSV")) is not None:
        raise Invalid(why)
    rows = list(csv.DictReader(io.StringIO(text)))
    if not rows or not {"email", "team"} <= set(rows[0]):
        raise Invalid("a teams CSV has a header with the columns email and team")
    placed: dict[int, Team] = {}
    for n, row in enumerate(rows, start=2):
        email, name = (row.get("email") or "").strip(), " ".join((row.get("team") or "").split())
        if not email or not name:
            raise Invalid(f"line {n}: an email and a team name")
        try:
            student = courses.student(session=session, course=assignment.course, email=email)
        except NotFound as exc:
            raise Invalid(f"line {n}: {exc.message}") from exc
        team = place(session=session, actor=actor, assignment=assignment, role=role,
                     student=student, team_name=name)
        placed[team.id] = team
    return list(placed.values())


def assign_at_random(*, session: Session, actor: User, assignment: Assignment,
                     role: str | None) -> list[Team]:
    """Every student of the course in no team of the assignment, shuffled into new teams of
    `team_max` (the last ones one smaller where the count does not divide)."""
    if not courses.is_staff(role):
        raise Forbidden("only the course's staff build teams")
    _changeable(assignment, role, by_student=False)
    inside = {m.user_id for t in of_assignment(session=session, assignment=assignment)
              for m in members(t)}
    alone = [u for u in courses.students(session=session, course=assignment.course)
             if u.id not in inside]
    random.SystemRandom().shuffle(alone)
    size = assignment.team_max or 1
    count = -(-len(alone) // size)
    made = []
    taken = {t.name for t in of_assignment(session=session, assignment=assignment)}
    number = 1
    for k in range(count):
        while f"Team {number}" in taken:
            number += 1
        name = f"Team {number}"
        taken.add(name)
        for student in alone[k::count]:
            team = place(session=session, actor=actor, assignment=assignment, role=role,
                         student=student, team_name=name)
        made.append(team)
    return made


def copy_from(*, session: Session, actor: User, assignment: Assignment, role: str | None,
              source: Assignment) -> list[Team]:
    """The teams of another assignment of the course, as they stand now, made again here
    (each member placed in the team of that name; the others of this assignment stay)."""
    if not courses.is_staff(role):
        raise Forbidden("only the course's staff build teams")
    if source.course_id != assignment.course_id or source.id == assignment.id:
        raise Invalid("teams are copied from another assignment of the same course")
    made: dict[int, Team] = {}
    for team in of_assignment(session=session, assignment=source):
        for m in members(team):
            t = place(session=session, actor=actor, assignment=assignment, role=role,
                      student=m.user, team_name=team.name)
            made[t.id] = t
    return list(made.values())
