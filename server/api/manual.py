"""Grading by a person, over the API: the rubric and the manual part's rules, a grader's queue
(the next student, held by one grader at a time), items applied and comments on lines, release,
a student's released feedback and regrade requests with their answers (services/by_hand/rubric.py,
services/by_hand/manual.py, services/by_hand/regrade_requests.py). Staff only, but for a
student's own feedback and requests."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response, status
from pydantic import ConfigDict, Field
from sqlalchemy import select
from sqlalchemy.orm import Session

from server.api import RowId
from server.api import regrades as regrade_api
from server.db import committing
from server.deps import CourseDep, CourseStaffDep, SessionDep, SettingsDep
from server.models import Assignment, Enrollment, ManualGrade, RubricItem, User
from server.schemas import ErrorPublic, Input, Paragraphs, Public, UtcDatetime
from server.schemas_regrades import ItemChoice, RegradeRequestPublic
from server.services.by_hand import manual, regrade_requests, rubric
from server.services.packages import assignments as assignment_service
from server.services.records import manual_points

router = APIRouter(prefix="/api/courses", tags=["manual grading"],
                   responses={401: {"model": ErrorPublic}, 403: {"model": ErrorPublic},
                              404: {"model": ErrorPublic}, 409: {"model": ErrorPublic},
                              422: {"model": ErrorPublic}})
A = "/{course}/assignments/{slug}"


class ItemIn(Paragraphs):
    MULTILINE = frozenset({"description"})
    title: str = Field(min_length=1, max_length=200)
    points: float = Field(ge=-rubric.MAX_POINTS, le=rubric.MAX_POINTS)
    group: str = Field(default="", max_length=100)
    description: str = Field(default="", max_length=5000)


class ItemEdit(Paragraphs):
    MULTILINE = frozenset({"description"})
    model_config = ConfigDict(extra="forbid")
    title: str | None = Field(default=None, min_length=1, max_length=200)
    points: float | None = Field(default=None, ge=-rubric.MAX_POINTS, le=rubric.MAX_POINTS)
    group: str | None = Field(default=None, max_length=100)
    description: str | None = Field(default=None, max_length=5000)


class ItemPublic(Public):
    id: int
    group: str
    title: str
    description: str
    points: float


class ItemAdded(ItemPublic):
    warning: str | None = Field(default=None, description="Where the rubric's items now add up "
                                "to more than hand grading may give")


class ItemChange(Public):
    item: ItemPublic | None
    changes: int = Field(description="Grades the change reaches (their totals follow)")
    saved: bool


class RulesIn(Input):
    model_config = ConfigDict(extra="forbid")
    points: float | None = Field(default=None, ge=0, le=rubric.MAX_POINTS)
    weight: float | None = Field(default=None, ge=0, le=10)
    regrade_limit: int | None = Field(default=None, ge=0, le=100)
    anonymous: bool | None = Field(default=None, description="Graders see 'student N' rather "
                                   "than who wrote the code")


class RubricPublic(Public):
    manual_points: float
    manual_weight: float
    regrade_limit: int
    anonymous: bool
    released_at: UtcDatetime | None
    items: list[ItemPublic]
    warning: str | None = Field(default=None, description="Where the items add up to more "
                                "than hand grading may give")


class CommentIn(Paragraphs):
    MULTILINE = frozenset({"body"})
    body: str = Field(min_length=1, max_length=manual.MAX_COMMENT_CHARS)
    file: str | None = Field(default=None, max_length=300)
    line: int | None = Field(default=None, ge=1, le=10_000_000)


class CommentPublic(Public):
    id: int
    file: str | None
    line: int | None
    body: str
    created_at: UtcDatetime


class GradePublic(Public):
    id: int
    student: str
    alias: str | None
    submission_id: int | None = Field(description="None while the assignment is graded "
                                      "anonymously")
    status: str
    held_by: str | None
    held_until: UtcDatetime | None
    points: float
    items: list[int] = Field(description="The rubric items applied (ids)")
    comments: list[CommentPublic]
    files: dict[str, list[str]] | None = Field(
        default=None, description="The submission's files as lines (one grade's view only)")


class Done(Input):
    done: bool = True


class Release(Input):
    released: bool = True


class FeedbackItem(Public):
    id: int
    group: str
    title: str
    description: str
    points: float


class FeedbackPublic(Public):
    points: float
    max_points: float
    weight: float
    released_at: UtcDatetime
    items: list[FeedbackItem] = Field(description="The rubric items applied")
    rubric: list[ItemChoice] = Field(description="The whole rubric, each item marked applied or "
                                     "not")
    comments: list[CommentPublic]
    requests: list[RegradeRequestPublic]


def _assignment(session: Session, access: CourseDep, slug: str) -> Assignment:
    return assignment_service.get(session=session, course=access.course, slug=slug)


def _item(i: RubricItem) -> ItemPublic:
    return ItemPublic(id=i.id, group=i.group, title=i.title, description=i.description,
                      points=i.points)


def _grade(session: Session, a: Assignment, g: ManualGrade, files: dict[str, list[str]] | None
           ) -> GradePublic:
    student = session.get(User, g.user_id)
    holder = session.get(User, g.locked_by) if g.locked_by else None
    assert student is not None
    items = manual.applied(session=session, grade=g)
    alias = session.scalar(select(Enrollment.alias).where(Enrollment.course_id == a.course_id,
                                                          Enrollment.user_id == g.user_id))
    anonymous = a.manual_anonymous  # graders read the code, not whose it is: no alias, and
    # no submission id (the submissions list and the CSV map it to a person)
    return GradePublic(
        id=g.id, student=manual.label(a, g, student), alias=None if anonymous else alias,
        submission_id=None if anonymous else g.submission_id,
        status=g.status, held_by=holder.email if holder else None, held_until=g.locked_until,
        points=manual_points.points(a, items), items=[i.id for i in items],
        comments=[CommentPublic.model_validate(c) for c in manual.comments(session=session,
                                                                          grade=g)],
        files=files)


@router.get(A + "/rubric", response_model=RubricPublic)
def get_rubric(slug: str, access: CourseStaffDep, session: SessionDep) -> RubricPublic:
    """The rubric and the manual part's rules."""
    a = _assignment(session, access, slug)
    return RubricPublic(manual_points=a.manual_points, manual_weight=a.manual_weight,
                        regrade_limit=a.regrade_limit, anonymous=a.manual_anonymous,
                        released_at=a.manual_released_at,
                        items=[_item(i) for i in rubric.items(session=session, assignment=a)],
                        warning=rubric.over_the_most(session=session, assignment=a))


@router.put(A + "/rubric", response_model=RubricPublic)
def set_rules(slug: str, body: RulesIn, access: CourseStaffDep,
              session: SessionDep) -> RubricPublic:
    """The most manual points, their weight beside the autograder's, the regrade requests a
    student may have open (instructors only)."""
    with committing(session):
        a = _assignment(session, access, slug)
        rubric.configure(session=session, assignment=a, actor=access.user, role=access.role,
                         points=body.points, weight=body.weight, regrade_limit=body.regrade_limit,
                         anonymous=body.anonymous)
    return get_rubric(slug, access, session)


@router.post(A + "/rubric/items", response_model=ItemAdded,
             status_code=status.HTTP_201_CREATED)
def add_item(slug: str, body: ItemIn, access: CourseStaffDep, session: SessionDep) -> ItemAdded:
    """Add an item; `warning` says where the items now add up to more than hand grading may
    give."""
    with committing(session):
        a = _assignment(session, access, slug)
        item = rubric.add(session=session, assignment=a, actor=access.user, role=access.role,
                          title=body.title, points=body.points, group=body.group,
                          description=body.description)
        return ItemAdded(**_item(item).model_dump(),
                         warning=rubric.over_the_most(session=session, assignment=a))


@router.patch(A + "/rubric/items/{item_id}", response_model=ItemChange)
def edit_item(slug: str, item_id: RowId, body: ItemEdit, access: CourseStaffDep,
              session: SessionDep, dry_run: Annotated[bool, Query()] = False) -> ItemChange:
    """Change an item for every grade it is applied to; `dry_run`: only say how many."""
    a = _assignment(session, access, slug)
    item = rubric.get(session=session, assignment=a, item_id=item_id)
    changes = rubric.edit(session=session, assignment=a, item=item, actor=access.user,
                          role=access.role, **body.model_dump(exclude_unset=True))
    out = ItemChange(item=_item(item), changes=changes, saved=not dry_run)
    session.rollback() if dry_run else session.commit()
    return out


@router.delete(A + "/rubric/items/{item_id}", response_model=ItemChange)
def delete_item(slug: str, item_id: RowId, access: CourseStaffDep, session: SessionDep,
                dry_run: Annotated[bool, Query()] = False) -> ItemChange:
    a = _assignment(session, access, slug)
    item = rubric.get(session=session, assignment=a, item_id=item_id)
    changes = rubric.remove(session=session, assignment=a, item=item, actor=access.user,
                            role=access.role)
    session.rollback() if dry_run else session.commit()
    return ItemChange(item=None, changes=changes, saved=not dry_run)


@router.post(A + "/grading/next", response_model=GradePublic,
             responses={204: {"description": "Every student's grade is done or held"}})
def next_grade(slug: str, access: CourseStaffDep, session: SessionDep,
               settings: SettingsDep) -> GradePublic | Response:
    """The next student not graded yet, held for you (one you hold already first)."""
    with committing(session):
        a = _assignment(session, access, slug)
        g = manual.next_ungraded(session=session, assignment=a, grader=access.user,
                                 role=access.role)
        if g is None:
            return Response(status_code=status.HTTP_204_NO_CONTENT)
        return _grade(session, a, g, manual.sources(submission=g.submission,
                                                    artifacts_root=settings.artifacts_dir))


@router.get(A + "/grading", response_model=list[GradePublic])
def grades(slug: str, access: CourseStaffDep, session: SessionDep) -> list[GradePublic]:
    """Every manual grade of the assignment so far (without the files)."""
    a = _assignment(session, access, slug)
    return [_grade(session, a, g, None) for g in session.scalars(
        select(ManualGrade).where(ManualGrade.assignment_id == a.id).order_by(ManualGrade.id))]


@router.get(A + "/grading/{grade_id}", response_model=GradePublic)
def grade(slug: str, grade_id: RowId, access: CourseStaffDep, session: SessionDep,
          settings: SettingsDep) -> GradePublic:
    a = _assignment(session, access, slug)
    g = manual.get(session=session, assignment=a, grade_id=grade_id)
    return _grade(session, a, g, manual.sources(submission=g.submission,
                                                artifacts_root=settings.artifacts_dir))


@router.put(A + "/grading/{grade_id}/items/{item_id}", response_model=GradePublic)
def apply_item(slug: str, grade_id: RowId, item_id: RowId, access: CourseStaffDep,
               session: SessionDep) -> GradePublic:
    return _apply(slug, grade_id, item_id, access, session, True)


@router.delete(A + "/grading/{grade_id}/items/{item_id}", response_model=GradePublic)
def take_off_item(slug: str, grade_id: RowId, item_id: RowId, access: CourseStaffDep,
                  session: SessionDep) -> GradePublic:
    return _apply(slug, grade_id, item_id, access, session, False)


def _apply(slug: str, grade_id: int, item_id: int, access: CourseStaffDep, session: Session,
           on: bool) -> GradePublic:
    with committing(session):
        a = _assignment(session, access, slug)
        g = manual.get(session=session, assignment=a, grade_id=grade_id)
        item = rubric.get(session=session, assignment=a, item_id=item_id)
        manual.apply(session=session, grade=g, item=item, grader=access.user, role=access.role,
                     applied=on)
        return _grade(session, a, g, None)


@router.post(A + "/grading/{grade_id}/comments", response_model=CommentPublic,
             status_code=status.HTTP_201_CREATED)
def add_comment(slug: str, grade_id: RowId, body: CommentIn, access: CourseStaffDep,
                session: SessionDep, settings: SettingsDep) -> CommentPublic:
    """A comment on a line of a file (`file` and `line`), or on the work as a whole."""
    with committing(session):
        a = _assignment(session, access, slug)
        g = manual.get(session=session, assignment=a, grade_id=grade_id)
        c = manual.comment(session=session, grade=g, grader=access.user, role=access.role,
                           body=body.body, file=body.file, line=body.line,
                           artifacts_root=settings.artifacts_dir)
        return CommentPublic.model_validate(c)


@router.delete(A + "/grading/{grade_id}/comments/{comment_id}",
               status_code=status.HTTP_204_NO_CONTENT)
def delete_comment(slug: str, grade_id: RowId, comment_id: RowId, access: CourseStaffDep,
                   session: SessionDep) -> None:
    with committing(session):
        a = _assignment(session, access, slug)
        g = manual.get(session=session, assignment=a, grade_id=grade_id)
        manual.delete_comment(session=session, grade=g, comment_id=comment_id,
                              grader=access.user, role=access.role)


@router.post(A + "/grading/{grade_id}/done", response_model=GradePublic)
def finish(slug: str, grade_id: RowId, body: Done, access: CourseStaffDep,
           session: SessionDep) -> GradePublic:
    """Mark the grade done (the hold ends), or open it again (`done`: false)."""
    with committing(session):
        a = _assignment(session, access, slug)
        g = manual.get(session=session, assignment=a, grade_id=grade_id)
        manual.finish(session=session, grade=g, grader=access.user, role=access.role,
                      done=body.done)
        return _grade(session, a, g, None)


@router.post(A + "/grading/release", response_model=RubricPublic)
def release(slug: str, body: Release, access: CourseStaffDep,
            session: SessionDep) -> RubricPublic:
    """Show the grades that are done to their students (`released`: false hides them again;
    instructors only)."""
    with committing(session):
        a = _assignment(session, access, slug)
        manual.release(session=session, assignment=a, actor=access.user, role=access.role,
                       released=body.released)
    return get_rubric(slug, access, session)


@router.get(A + "/feedback", response_model=FeedbackPublic)
def feedback(slug: str, access: CourseDep, session: SessionDep) -> FeedbackPublic:
    """Your manual grade, once released: the items applied (and the whole rubric, each marked),
    the comments at their lines, the regrade requests about it."""
    a = _assignment(session, access, slug)
    f = manual.feedback(session=session, assignment=a, user=access.user)
    return FeedbackPublic(
        points=f.points, max_points=a.manual_points, weight=a.manual_weight,
        released_at=f.released_at,
        items=[FeedbackItem(id=i.id, group=i.group, title=i.title, description=i.description,
                            points=i.points) for i in f.items],
        rubric=[ItemChoice(id=i.id, group=i.group, title=i.title, description=i.description,
                           points=i.points, applied=i.id in {x.id for x in f.items})
                for i in rubric.items(session=session, assignment=a)],
        comments=[CommentPublic.model_validate(c) for c in f.comments],
        requests=[regrade_api.public(r) for r in regrade_requests.of_student(
            session=session, assignment=a, student=access.user)])
