"""Courses, join codes and roles."""

from __future__ import annotations

import csv
import io
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from runners.protocol import SLUG_RE, text
from server import aliases, security
from server.models import (
    AuditLog,
    Course,
    Enrollment,
    LtiIdentity,
    LtiPlatform,
    RosterEntry,
    User,
)
from server.services.records.errors import Conflict, Forbidden, Invalid, NotFound

ROLES = ("instructor", "ta", "student")
STAFF = frozenset({"instructor", "ta"})
"""Who sees every submission and report of a course and runs regrades. Only instructors change
policy, import packages, grant extensions, decide reviews and manage the roster and roles."""


def is_staff(role: str | None) -> bool:
    return role in STAFF


def create(*, session: Session, actor: User, slug: str, title: str) -> Course:
    """A course with a fresh join code; its creator is its first instructor."""
    if not actor.is_instructor:
        raise Forbidden("only instructors create courses")
    if session.scalar(select(Course).where(Course.slug == slug)):
        raise Conflict(f"course {slug!r} exists")
    course = Course(slug=slug, title=title, join_code=security.join_code())
    session.add(course)
    session.flush()
    session.add(Enrollment(user_id=actor.id, course_id=course.id, role="instructor"))
    session.add(AuditLog(actor_id=actor.id, action="course.create", target=slug))
    session.flush()
    return course


def with_role(*, session: Session, slug: str, user: User) -> tuple[Course, str | None]:
    """The course and `user`'s role in it (None: not enrolled), in one query."""
    # Not a slug, not a course; and never a query (PostgreSQL refuses text with NUL in it).
    row = session.execute(
        select(Course, Enrollment.role).outerjoin(Enrollment, (Enrollment.course_id == Course.id)
                                                  & (Enrollment.user_id == user.id))
        .where(Course.slug == slug)).first() if re.fullmatch(SLUG_RE, slug) else None
    if row is None:
        raise NotFound(f"no course {slug!r}")
    return row[0], row[1]


def join(*, session: Session, user: User, join_code: str, alias: str | None = None) -> Enrollment:
    """Enroll as a student with a course's join code."""
    course = session.scalar(select(Course).where(Course.join_code == join_code.strip()))
    if course is None:
        raise NotFound("no course has this join code")
    existing = session.scalar(select(Enrollment).where(Enrollment.user_id == user.id,
                                                       Enrollment.course_id == course.id))
    if existing is not None:
        return existing
    if alias is not None and alias_taken(session=session, course=course, alias=alias,
                                         user=user):
        raise Conflict(f"the alias {alias!r} is taken in this course (or one that looks like "
                       "it): choose another")
    if alias is None:  # the roster's, else the one this student shows on other leaderboards
        alias = roster_alias(session=session, user=user, course=course)
    if alias is None:
        alias = session.scalar(select(Enrollment.alias).where(
            Enrollment.user_id == user.id, Enrollment.alias.is_not(None))
            .order_by(Enrollment.id).limit(1))
        if alias is not None and alias_taken(session=session, course=course, alias=alias,
                                             user=user):
            alias = None
    enrollment = Enrollment(user_id=user.id, course_id=course.id, role="student", alias=alias)
    session.add(enrollment)
    session.flush()
    return enrollment


def role(*, session: Session, user: User, course: Course) -> str | None:
    """'instructor', 'ta', 'student', or None when not enrolled."""
    return session.scalar(select(Enrollment.role).where(Enrollment.user_id == user.id,
                                                        Enrollment.course_id == course.id))


def mine(*, session: Session, user: User) -> list[tuple[Course, str]]:
    rows = session.execute(select(Course, Enrollment.role).join(
        Enrollment, Enrollment.course_id == Course.id).where(Enrollment.user_id == user.id))
    return [(c, r) for c, r in rows]


@dataclass(frozen=True)
class Member:
    email: str
    name: str
    alias: str | None
    role: str | None  # None: on the roster, no account yet
    on_roster: bool
    lms_email: str | None = None  # what this course's LMS asserted (unverified)


def members(*, session: Session, course: Course) -> list[Member]:
    """Everyone enrolled, and the roster's emails that have no account yet; beside an account
    launched from this course's LMS, the email that LMS asserted."""
    roster = {r.email: r for r in session.scalars(
        select(RosterEntry).where(RosterEntry.course_id == course.id))}
    lms = {user_id: email for user_id, email in session.execute(
        select(LtiIdentity.user_id, LtiIdentity.email).join(
            LtiPlatform, (LtiPlatform.issuer == LtiIdentity.issuer)
            & (LtiPlatform.key_set_url == LtiIdentity.key_set_url)).where(
            LtiPlatform.course_id == course.id, LtiIdentity.email.is_not(None)))}
    out = [Member(u.email, u.name, e.alias, e.role, u.email in roster, lms.get(u.id))
           for e, u in session.execute(select(Enrollment, User).join(
               User, User.id == Enrollment.user_id).where(Enrollment.course_id == course.id))]
    enrolled = {m.email for m in out}
    out += [Member(r.email, r.name, r.alias, None, True) for r in roster.values()
            if r.email not in enrolled]
    order = {"instructor": 0, "ta": 1, "student": 2, None: 3}
    return sorted(out, key=lambda m: (order[m.role], m.email))


def set_role(*, session: Session, actor: User, course: Course, role: str | None, email: str,
             new_role: str) -> Enrollment:
    """Make an account instructor, TA or student of the course (enrolling it if need be);
    a course always keeps one instructor. Audit-logged."""
    if role != "instructor":
        raise Forbidden("only the course's instructors change roles")
    if new_role not in ROLES:
        raise Invalid(f"role must be one of {', '.join(ROLES)}")
    user = session.scalar(select(User).where(User.email == email.strip().lower()))
    if user is None:
        raise NotFound(f"no account with {email.strip()!r}: they register first (or import "
                       "them with the roster)")
    if new_role == "instructor" and not user.is_instructor:
        raise Invalid(f"{user.email} is not an instructor account; make them a TA, or have an "
                      "administrator create an instructor account")
    enrollment = session.scalar(select(Enrollment).where(Enrollment.user_id == user.id,
                                                         Enrollment.course_id == course.id))
    old = enrollment.role if enrollment is not None else None
    if enrollment is None:
        enrollment = Enrollment(user_id=user.id, course_id=course.id, role=new_role)
        session.add(enrollment)
    elif enrollment.role == "instructor" and new_role != "instructor":
        others = session.scalar(select(func.count()).select_from(Enrollment).where(
            Enrollment.course_id == course.id, Enrollment.role == "instructor",
            Enrollment.id != enrollment.id))
        if not others:
            raise Conflict("a course keeps at least one instructor")
    enrollment.role = new_role
    session.add(AuditLog(actor_id=actor.id, action="member.role", target=f"{course.slug}/{user.email}",
                         detail={"from": old, "to": new_role}))
    session.flush()
    return enrollment


# Roster import ----------------------------------------------------------------------------------
EMAIL_RE = r"[^@\s]+@[^@\s]+\.[^@\s]+"
ALIAS_RE = r"[\w .-]+"
MAX_ROSTER_ROWS = 10_000
MAX_ROSTER_BYTES = 4 << 20
# Column names as LMS exports spell them (Canvas, Moodle, Blackboard), lower-cased.
EMAIL_COLUMNS = ("email", "email address", "e-mail", "e-mail address", "mail")
NAME_COLUMNS = ("name", "full name", "student", "student name", "display name")
FIRST_COLUMNS = ("first name", "given name", "firstname")
LAST_COLUMNS = ("last name", "surname", "family name", "lastname")


@dataclass(frozen=True)
class RosterRow:
    line: int
    email: str
    outcome: str  # enrolled | invited | updated | unchanged | refused
    detail: str = ""


def _rows(data: bytes) -> tuple[list[str], list[list[str]]]:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise Invalid("the roster is not UTF-8 text (export it from the LMS as CSV, UTF-8)") from exc
    lines = text.splitlines()
    if not lines or not lines[0].strip():
        raise Invalid("the roster is empty: a CSV with a header line (email, name, alias)")
    try:
        dialect: Any = csv.Sniffer().sniff(lines[0][:4096], delimiters=",;\t")
    except csv.Error:
        dialect = csv.excel
    try:
        rows = list(csv.reader(io.StringIO(text), dialect))
    except csv.Error as exc:  # a cell over the csv module's limit (128 KiB), a stray NUL
        raise Invalid(f"the roster is not a CSV file this server reads ({exc}); export it from "
                      "the LMS again") from exc
    if len(rows) - 1 > MAX_ROSTER_ROWS:
        raise Invalid(f"the roster has {len(rows) - 1} rows; at most {MAX_ROSTER_ROWS} at once")
    return [h.strip().lower() for h in rows[0]], rows[1:]


def import_roster(*, session: Session, actor: User, course: Course, role: str | None,
                  data: bytes) -> list[RosterRow]:
    """Put a CSV exported by an LMS (email, name, optional alias) on the course's roster: an
    account that exists is enrolled as a student, an email without one waits for its owner.
    Importing the same file again changes nothing; every row says what became of it."""
    if role != "instructor":
        raise Forbidden("only the course's instructors import the roster")
    header, rows = _rows(data)

    def column(names: tuple[str, ...]) -> int | None:
        return next((header.index(n) for n in names if n in header), None)

    at_email, at_alias = column(EMAIL_COLUMNS), column(("alias", "nickname", "leaderboard alias"))
    at_name, at_first, at_last = column(NAME_COLUMNS), column(FIRST_COLUMNS), column(LAST_COLUMNS)
    if at_email is None:
        raise Invalid(f"the roster has no email column (its header: {', '.join(header)}); "
                      "name one 'email'")
    accounts = {u.email: u for u in session.scalars(select(User).where(User.email.in_(
        {r[at_email].strip().lower() for r in rows
         if len(r) > at_email and text.problem(r[at_email]) is None})))}
    enrolled = {e.user_id: e for e in session.scalars(
        select(Enrollment).where(Enrollment.course_id == course.id))}
    roster = {r.email: r for r in session.scalars(
        select(RosterEntry).where(RosterEntry.course_id == course.id))}
    report: list[RosterRow] = []
    seen: set[str] = set()
    owners = alias_owners(session=session, course=course)
    for n, row in enumerate(rows, start=2):
        if not any(cell.strip() for cell in row):
            continue

        def cell(i: int | None, r: list[str] = row) -> str:
            return r[i].strip() if i is not None and i < len(r) else ""

        email = cell(at_email).lower()
        name = cell(at_name) or " ".join(x for x in (cell(at_first), cell(at_last)) if x)
        alias = cell(at_alias) or None
        if (refused := _refused(n, email, name, alias, seen=seen)) is not None:
            report.append(refused)
            continue
        seen.add(email)  # an earlier row's email, even where its alias is refused below
        if (refused := _alias_refused(n, email, alias, owners=owners)) is not None:
            report.append(refused)
            continue
        if alias is not None:
            for key in aliases.keys(alias):
                owners.setdefault(key, set()).add(email)
        name = (name or email.split("@")[0])[:200]
        entry = roster.get(email)
        changed = entry is None or (entry.name, entry.alias) != (name, alias)
        if entry is None:
            entry = roster[email] = RosterEntry(course_id=course.id, email=email, name=name,
                                                alias=alias)
            session.add(entry)
        entry.name, entry.alias = name, alias
        report.append(_enrol(session, course, n, email, alias, user=accounts.get(email),
                             enrolled=enrolled, changed=changed))
    session.add(AuditLog(actor_id=actor.id, action="roster.import", target=course.slug,
                         detail=tally(report)))
    session.flush()
    return report


def _refused(n: int, email: str, name: str, alias: str | None, *, seen: set[str]
             ) -> RosterRow | None:
    """Row `n` refused for its text, its email, or an email an earlier row had; else None."""
    why = next((w for v, what in ((email, "the email"), (name, "the name"),
                                  (alias or "", "the alias"))
                if (w := text.problem(v, what)) is not None), None)
    if why is not None:
        return RosterRow(n, email.encode("unicode_escape").decode(), "refused", why)
    if not re.fullmatch(EMAIL_RE, email) or len(email) > 320:
        return RosterRow(n, email, "refused", "not an email address")
    if email in seen:
        return RosterRow(n, email, "refused", "the same email is on an earlier row")
    return None


def _alias_refused(n: int, email: str, alias: str | None, *, owners: dict[str, set[str]]
                   ) -> RosterRow | None:
    """Row `n` refused for its alias (not allowed, or taken in the course); else None."""
    if alias is None:
        return None
    if len(alias) > 64 or not re.fullmatch(ALIAS_RE, alias):
        return RosterRow(n, email, "refused", "alias: use at most 64 letters, digits, "
                                              "spaces, '.', '_' or '-'")
    if _taken(owners, alias, email):
        return RosterRow(n, email, "refused", f"alias {alias!r} is taken in this "
                         "course (or one that looks like it)")
    return None


def _enrol(session: Session, course: Course, n: int, email: str, alias: str | None, *,
           user: User | None, enrolled: dict[int, Enrollment], changed: bool) -> RosterRow:
    """Row `n`'s account enrolled as a student (or its alias updated); invited where there is
    no account yet; staff left as they are."""
    if user is None:
        return RosterRow(n, email, "invited" if changed else "unchanged",
                         "no account yet: enrolled when they register with the "
                         "course's join code or arrive from the LMS")
    enrollment = enrolled.get(user.id)
    if enrollment is None:
        enrolled[user.id] = Enrollment(user_id=user.id, course_id=course.id, role="student",
                                       alias=alias)
        session.add(enrolled[user.id])
        return RosterRow(n, email, "enrolled")
    if enrollment.role != "student":
        return RosterRow(n, email, "unchanged", f"already the course's {enrollment.role}; "
                         "roles change on the members page")
    if alias is not None and enrollment.alias != alias:
        enrollment.alias = alias
        return RosterRow(n, email, "updated", "alias")
    return RosterRow(n, email, "updated" if changed else "unchanged")


def tally(report: list[RosterRow]) -> dict[str, int]:
    """How many rows of a roster import came to each outcome."""
    return dict(Counter(r.outcome for r in report))


def roster_alias(*, session: Session, user: User, course: Course) -> str | None:
    """The alias the course's roster gives this account's email, if any (and no one else in the
    course shows it or one like it)."""
    alias = session.scalar(select(RosterEntry.alias).where(RosterEntry.course_id == course.id,
                                                           RosterEntry.email == user.email))
    if alias is None or alias_taken(session=session, course=course, alias=alias, user=user):
        return None
    return alias


def alias_owners(*, session: Session, course: Course) -> dict[str, set[str]]:
    """Each look-alike key (server.aliases) of the course's aliases, members' and roster
    rows', and the emails showing it."""
    owners: dict[str, set[str]] = {}
    shown = list(session.execute(select(Enrollment.alias, User.email).join(
        User, User.id == Enrollment.user_id).where(Enrollment.course_id == course.id,
                                                   Enrollment.alias.is_not(None))).all())
    shown += session.execute(select(RosterEntry.alias, RosterEntry.email).where(
        RosterEntry.course_id == course.id, RosterEntry.alias.is_not(None))).all()
    for alias, email in shown:
        for key in aliases.keys(alias or ""):
            owners.setdefault(key, set()).add(email)
    return owners


def _taken(owners: dict[str, set[str]], alias: str, email: str | None) -> bool:
    """Someone else shows it (or a look-alike), or it is one of the board's own labels."""
    return aliases.reserved(alias) or any(owners.get(key, set()) - {email}
                                          for key in aliases.keys(alias))


def alias_taken(*, session: Session, course: Course, alias: str, user: User | None = None
                ) -> bool:
    """Whether someone else in the course (a member, or a roster row) shows this alias or one
    that looks like it: a leaderboard never shows two look-alike names."""
    return _taken(alias_owners(session=session, course=course), alias,
                  user.email if user is not None else None)


def student(*, session: Session, course: Course, email: str) -> User:
    """The course's student with this email (404: no such student in it)."""
    user = session.scalar(select(User).join(Enrollment, Enrollment.user_id == User.id).where(
        User.email == email.strip().lower(), Enrollment.course_id == course.id,
        Enrollment.role == "student"))
    if user is None:
        raise NotFound(f"no student {email.strip()!r} in {course.slug}")
    return user


def students(*, session: Session, course: Course) -> list[User]:
    """The course's students, by email."""
    return list(session.scalars(select(User).join(Enrollment, Enrollment.user_id == User.id)
                                .where(Enrollment.course_id == course.id,
                                       Enrollment.role == "student").order_by(User.email)))
