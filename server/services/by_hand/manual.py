"""Grading by a person: a grader takes the next student not yet graded, reads the code beside
the report, applies rubric items and comments on lines, and marks the grade done; an
instructor releases the assignment's manual grades, and only then does a student see theirs.

Which submission is read: the student's counted one (their leaderboard entry's), else their
latest. One grader holds a grade at a time: taking or changing it takes the hold for LOCK_S
(compare-and-set in the database, so two graders racing for one student get one each), and a
hold left by a closed tab ends by itself. A grade's points are read from the items applied (an
edited item changes them), bounded by the assignment's manual points; the total a student gets
is the autograder's points plus the manual points times the assignment's weight."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from server.models import (
    AppliedItem,
    Assignment,
    AuditLog,
    BoardEntry,
    Enrollment,
    ManualComment,
    ManualGrade,
    RubricItem,
    Submission,
    User,
    aware,
    now,
)
from server.services.grades import grade_changes
from server.services.notices import notify
from server.services.packages import assignments
from server.services.people import courses, teams, users
from server.services.records import artifacts
from server.services.records.errors import Conflict, Forbidden, Invalid, NotFound
from server.services.records.manual_points import points

LOCK_S = 900
"""How long a grader's hold on a grade lasts after their last action on it."""
MAX_COMMENT_CHARS = 5000
MAX_SOURCE_BYTES = 2_000_000


def _staff(role: str | None) -> None:
    if not courses.is_staff(role):
        raise Forbidden("only the course's instructors and TAs grade by hand")


def graded_submissions(*, session: Session, assignment: Assignment) -> dict[int, int]:
    """Each enrolled student's submission to read: their board entry's, else their latest (of
    those they share); a team's once, under its first member (its grade is every member's:
    records/manual_points.py)."""
    pairs = teams.sharers()
    latest: dict[int, int] = dict(session.execute(
        select(pairs.c.uid, func.max(Submission.id)).join(pairs, pairs.c.sid == Submission.id)
        .join(Enrollment, (Enrollment.user_id == pairs.c.uid)
              & (Enrollment.course_id == assignment.course_id))
        .where(Submission.assignment_id == assignment.id, Enrollment.role == "student")
        .group_by(pairs.c.uid)).all())
    counted = dict(session.execute(select(BoardEntry.user_id, BoardEntry.submission_id)
                                   .where(BoardEntry.assignment_id == assignment.id)).all())
    out: dict[int, int] = {}
    for uid, sid in sorted(latest.items()):
        chosen = counted.get(uid, sid)
        if chosen not in out.values():
            out[uid] = chosen
    return out


def _take(session: Session, grade_id: int, grader: User) -> bool:
    """Hold the grade for `grader` unless another holds it; whether it is theirs now."""
    t = now()
    won = session.execute(
        update(ManualGrade).where(ManualGrade.id == grade_id, or_(
            ManualGrade.locked_by.is_(None), ManualGrade.locked_by == grader.id,
            ManualGrade.locked_until < t))
        .values(locked_by=grader.id, locked_until=t + timedelta(seconds=LOCK_S),
                grader_id=grader.id, updated_at=t)
        .execution_options(synchronize_session=False))  # the callers refresh what they hold
    return bool(won.rowcount == 1)  # type: ignore[attr-defined]


def next_ungraded(*, session: Session, assignment: Assignment, grader: User,
                  role: str | None) -> ManualGrade | None:
    """The next student's grade not done and not held by another grader, now held by
    `grader` (one they hold already first); None: every student's grade is done or held.
    A grader's own calls take turns (their account's hold), so "next" pressed twice at once
    holds one student, not two."""
    _staff(role)
    users.hold(session=session, user_id=grader.id)
    mine = session.scalar(select(ManualGrade).where(
        ManualGrade.assignment_id == assignment.id, ManualGrade.locked_by == grader.id,
        ManualGrade.status == "grading", ManualGrade.locked_until > now()))
    if mine is not None and _take(session, mine.id, grader):
        session.refresh(mine)
        return mine
    existing = {g.user_id: g for g in session.scalars(
        select(ManualGrade).where(ManualGrade.assignment_id == assignment.id))}
    for user_id, submission_id in graded_submissions(session=session,
                                                     assignment=assignment).items():
        grade = existing.get(user_id)
        if grade is None:
            grade = ManualGrade(assignment_id=assignment.id, user_id=user_id,
                                submission_id=submission_id, locked_by=grader.id,
                                grader_id=grader.id,
                                locked_until=now() + timedelta(seconds=LOCK_S))
            try:
                with session.begin_nested():
                    session.add(grade)
            except IntegrityError:  # another grader started this student a moment ago
                continue
            return grade
        if grade.status == "grading" and _take(session, grade.id, grader):
            session.refresh(grade)
            return grade
    return None


def get(*, session: Session, assignment: Assignment, grade_id: int) -> ManualGrade:
    grade = session.get(ManualGrade, grade_id)
    if grade is None or grade.assignment_id != assignment.id:
        raise NotFound(f"no manual grade {grade_id} in {assignment.slug}")
    return grade


def label(assignment: Assignment, grade: ManualGrade, student: User) -> str:
    """Whose a grade is, as the course's staff see it on every grading surface (the grading
    list and page, the grade's JSON, the regrade requests): "student N" (the grade's number)
    while the assignment is graded anonymously, else the student's email (and a team's grade,
    given once for its members, its team's name)."""
    if assignment.manual_anonymous:
        return f"student {grade.id}"
    team = grade.submission.team if grade.submission is not None else None
    return f"{student.email} (team {team.name})" if team is not None else student.email


def hold(*, session: Session, grade: ManualGrade, grader: User, role: str | None) -> None:
    """Take (or renew) the hold on `grade` before changing it; Conflict while another has it."""
    _staff(role)
    if not _take(session, grade.id, grader):
        session.refresh(grade)
        holder = session.get(User, grade.locked_by) if grade.locked_by else None
        until = aware(grade.locked_until) if grade.locked_until else None
        raise Conflict(f"{holder.name if holder else 'another grader'} is grading this student "
                       f"until {until:%H:%M} UTC (or until they finish); take the next one"
                       if until else "another grader is grading this student")
    session.refresh(grade)


def apply(*, session: Session, grade: ManualGrade, item: RubricItem, grader: User,
          role: str | None, applied: bool = True) -> None:
    """Apply (or take off) a rubric item on a grade being graded; a done grade is opened again
    first (`finish(done=False)`), so that a released total never changes unseen."""
    hold(session=session, grade=grade, grader=grader, role=role)
    if grade.status == "done":
        raise Conflict("this grade is done: open it again before changing its items (its "
                       "manual points leave the totals until you finish it again)")
    _set_item(session, grade, item, applied, grader)


def amend(*, session: Session, grade: ManualGrade, item: RubricItem, grader: User,
          role: str | None, applied: bool) -> tuple[float, float] | None:
    """Change one item of a grade in answer to a regrade request: the grade is done again at
    once, and its new total reaches the boards and the LMS (`changed`); the grade's points
    before and after (None: the item was as asked already)."""
    hold(session=session, grade=grade, grader=grader, role=role)
    moved = _set_item(session, grade, item, applied, grader)
    grade.status, grade.locked_by, grade.locked_until = "done", None, None
    session.flush()
    changed(session=session, grade=grade)
    return moved


def _set_item(session: Session, grade: ManualGrade, item: RubricItem, on: bool,
              grader: User) -> tuple[float, float] | None:
    """Put the item on the grade or take it off; where that changes it, an audit row says which
    item and the grade's points before and after, which are returned."""
    if item.assignment_id != grade.assignment_id:
        raise NotFound("that rubric item belongs to another assignment")
    there = session.get(AppliedItem, (grade.id, item.id))
    if (there is not None) == on:
        return None
    a = session.get(Assignment, grade.assignment_id)
    assert a is not None
    before = points(a, applied(session=session, grade=grade))
    if on:
        session.add(AppliedItem(grade_id=grade.id, item_id=item.id))
    else:
        session.delete(there)
    session.flush()
    after = points(a, applied(session=session, grade=grade))
    session.add(AuditLog(actor_id=grader.id, action="manual.item_applied" if on
                         else "manual.item_removed", target=f"grade/{grade.id}",
                         detail={"item": item.id, "title": item.title,
                                 "item_points": item.points, "points_before": before,
                                 "points_after": after}))
    session.flush()
    return before, after


def sources(*, submission: Submission, artifacts_root: Path) -> dict[str, list[str]]:
    """The submission's files as lines of text (undecodable bytes replaced)."""
    data = artifacts.read(root=artifacts_root, sha256=submission.archive_sha256)
    files = assignments.safe_members(data, max_total=MAX_SOURCE_BYTES)
    return {name: body.decode("utf-8", "replace").splitlines()
            for name, body in sorted(files.items())}


def comment(*, session: Session, grade: ManualGrade, grader: User, role: str | None, body: str,
            artifacts_root: Path, file: str | None = None, line: int | None = None
            ) -> ManualComment:
    """A comment on a line of one of the submission's files, or on the work (`file` None)."""
    hold(session=session, grade=grade, grader=grader, role=role)
    if not body.strip():
        raise Invalid("a comment needs some text")
    if len(body) > MAX_COMMENT_CHARS:
        raise Invalid(f"a comment holds at most {MAX_COMMENT_CHARS} characters")
    if (file is None) != (line is None):
        raise Invalid("a comment on the code names both its file and its line")
    if file is not None and line is not None:
        lines = sources(submission=grade.submission, artifacts_root=artifacts_root).get(file)
        if lines is None:
            raise Invalid(f"the submission has no file {file!r}")
        if not 1 <= line <= max(len(lines), 1):
            raise Invalid(f"{file} has lines 1 to {len(lines)}")
    c = ManualComment(grade_id=grade.id, author_id=grader.id, file=file, line=line, body=body)
    session.add(c)
    session.flush()
    return c


def delete_comment(*, session: Session, grade: ManualGrade, comment_id: int, grader: User,
                   role: str | None) -> None:
    hold(session=session, grade=grade, grader=grader, role=role)
    c = session.get(ManualComment, comment_id)
    if c is None or c.grade_id != grade.id:
        raise NotFound(f"no comment {comment_id} on this grade")
    session.delete(c)
    session.flush()


def finish(*, session: Session, grade: ManualGrade, grader: User, role: str | None,
           done: bool = True) -> None:
    """Mark the grade done (and let go of it), or open it again."""
    hold(session=session, grade=grade, grader=grader, role=role)
    grade.status = "done" if done else "grading"
    if done:
        grade.locked_by, grade.locked_until = None, None
    session.flush()
    changed(session=session, grade=grade)


def changed(*, session: Session, grade: ManualGrade) -> None:
    """One student's manual grade may have changed: where it is released, that student's board
    row and LMS gradebook entry follow (the others' stay as they are)."""
    a = session.get(Assignment, grade.assignment_id)
    if a is not None and a.manual_released_at is not None:
        grade_changes.of_student(session=session, assignment_id=a.id, user_id=grade.user_id)


def applied(*, session: Session, grade: ManualGrade) -> list[RubricItem]:
    return list(session.scalars(select(RubricItem).join(
        AppliedItem, AppliedItem.item_id == RubricItem.id).where(AppliedItem.grade_id == grade.id)
        .order_by(RubricItem.position, RubricItem.id)))


def comments(*, session: Session, grade: ManualGrade) -> list[ManualComment]:
    return list(session.scalars(select(ManualComment).where(ManualComment.grade_id == grade.id)
                                .order_by(ManualComment.file.is_(None).desc(),  # on the work
                                          ManualComment.file, ManualComment.line,
                                          ManualComment.id)))


def done_count(*, session: Session, assignment: Assignment) -> int:
    """The grades a release would show their students (those that are done)."""
    return session.scalar(select(func.count()).select_from(ManualGrade).where(
        ManualGrade.assignment_id == assignment.id, ManualGrade.status == "done")) or 0


def release(*, session: Session, assignment: Assignment, actor: User, role: str | None,
            released: bool = True) -> None:
    """Show (or hide again) the manual grades that are done to their students."""
    if role != "instructor":
        raise Forbidden("only the course's instructors release manual grades")
    assignment.manual_released_at = now() if released else None
    session.add(AuditLog(actor_id=actor.id, action="manual.release" if released
                         else "manual.withhold",
                         target=f"{assignment.course.slug}/{assignment.slug}"))
    session.flush()
    grade_changes.of_everyone(session=session, assignment_id=assignment.id)
    if released:
        _tell_released(session, assignment)


def _tell_released(session: Session, assignment: Assignment) -> None:
    """Each student of a grade that is done (a team's members: every one) reads it is out."""
    link = f"/c/{assignment.course.slug}/{assignment.slug}/feedback"
    for g in session.scalars(select(ManualGrade).where(
            ManualGrade.assignment_id == assignment.id, ManualGrade.status == "done")):
        for uid in teams.sharers_of(session=session, submission_id=g.submission_id):
            notify.notify(session=session, user_id=uid, kind="manual_released",
                          key=f"manual:{assignment.id}", link=link,
                          title=f"{assignment.title}: your grade by hand is released")


@dataclass(frozen=True)
class Feedback:
    """What a student sees of their manual grade once released."""

    grade: ManualGrade
    items: list[RubricItem]
    comments: list[ManualComment]
    points: float
    released_at: datetime


def grade_of(*, session: Session, assignment: Assignment, user_id: int) -> ManualGrade | None:
    """The student's manual grade: their own, else the one that read the submission their
    board counts (a team's, graded once under its first member)."""
    own = session.scalar(select(ManualGrade).where(ManualGrade.assignment_id == assignment.id,
                                                   ManualGrade.user_id == user_id))
    if own is not None:
        return own
    counted = select(BoardEntry.submission_id).where(BoardEntry.assignment_id == assignment.id,
                                                     BoardEntry.user_id == user_id)
    return session.scalar(select(ManualGrade).where(
        ManualGrade.assignment_id == assignment.id,
        ManualGrade.submission_id.in_(counted)).limit(1))


def feedback(*, session: Session, assignment: Assignment, user: User) -> Feedback:
    """A student's own released manual grade (their team's: the one of the submission their
    board counts); NotFound before release or while not done."""
    grade = grade_of(session=session, assignment=assignment, user_id=user.id)
    if assignment.manual_released_at is None or grade is None or grade.status != "done":
        raise NotFound(f"no manual grade of {assignment.slug} has been released to you yet")
    items = applied(session=session, grade=grade)
    return Feedback(grade, items, comments(session=session, grade=grade),
                    points(assignment, items), assignment.manual_released_at)
