"""Grades owed to LMS gradebooks (Assignment and Grade Services): what each student is owed
follows the leaderboard, and the reaper posts it in its own transaction, never in the request
that changed it. A post the LMS refuses or cannot take stays pending, with its error, and is
retried with backoff until it is taken."""

from __future__ import annotations

import logging
from datetime import timedelta

import requests
from pylti1p3.assignments_grades import AssignmentsGradesService
from pylti1p3.exception import LtiException, LtiServiceException
from pylti1p3.grade import Grade
from pylti1p3.service_connector import ServiceConnector
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from server.models import (
    Assignment,
    BoardEntry,
    Course,
    GradeReportRow,
    LtiGradePost,
    LtiPlatform,
    Submission,
    now,
)
from server.services.lti.platforms import LmsHttp, PlatformRegistration, policy
from server.services.packages import assignments as assignment_service
from server.services.people import teams
from server.services.records import final_grades, manual_points, outbound
from server.settings import ServerSettings, get_settings

RETRY_MAX_S = 3600

log = logging.getLogger("paragrade.lti")


def current_score(session: Session, assignment_id: int, user_id: int) -> float | None:
    """The autograder's points (`_autograded`) plus the released manual ones; None before
    anything is graded."""
    auto = _autograded(session, assignment_id, user_id)
    a = session.get(Assignment, assignment_id)
    by_hand = None if a is None else manual_points.released_points(
        session=session, assignment=a, user_id=user_id).get(user_id)
    if auto is None and by_hand is None:
        return None
    return round((auto or 0.0) + (by_hand or 0.0), 2)


def _autograded(session: Session, assignment_id: int, user_id: int) -> float | None:
    """The score the assignment's latest final run settled, else the one the leaderboard uses
    (its entry's, after late policy and reviews), else the student's best graded score (of the
    submissions they share: their team's too)."""
    final = final_grades.grade_of(session=session, assignment_id=assignment_id, user_id=user_id)
    if final is not None:
        return final.score
    board = session.scalar(select(GradeReportRow.score).join(
        BoardEntry, BoardEntry.submission_id == GradeReportRow.submission_id).where(
        BoardEntry.assignment_id == assignment_id, BoardEntry.user_id == user_id))
    if board is not None:
        return float(board)
    best = session.scalar(select(GradeReportRow.score).join(
        Submission, Submission.id == GradeReportRow.submission_id).where(
        Submission.assignment_id == assignment_id, teams.shared(user_id))
        .order_by(GradeReportRow.score.desc()).limit(1))
    return None if best is None else float(best)


def grade_changed(*, session: Session, assignment_id: int, user_id: int | None = None) -> None:
    """A grade of this assignment (one student's, or everyone's) may have changed: what is owed
    to each LMS gradebook becomes pending (posted by the reaper, in its own transaction)."""
    q = select(LtiGradePost).where(LtiGradePost.assignment_id == assignment_id)
    if user_id is not None:
        q = q.where(LtiGradePost.user_id == user_id)
    for post in session.scalars(q):
        score = current_score(session, assignment_id, post.user_id)
        if score is None or (score == post.score and post.state == "pending"):
            continue  # nothing graded yet, or this very score already waits to be posted
        post.score, post.state, post.attempts, post.next_at = score, "pending", 0, now()
        post.max_score = _max_score(session, assignment_id)


def _max_score(session: Session, assignment_id: int) -> float:
    a = session.get(Assignment, assignment_id)
    if a is None:
        return 100.0
    scoring = assignment_service.manifest_of(a).scoring
    return float(scoring.test_points + scoring.performance_points) + manual_points.max_points(a)


def send_pending(*, sessions: sessionmaker[Session], settings: ServerSettings | None = None
                 ) -> tuple[int, int]:
    """Post every pending grade that is due; (sent, failed). A failure keeps the grade pending
    with a fixed account of it (the LMS's answer goes to the log, never to the page: it may be
    anything the registered address serves) and the time of the next try (backoff up to an
    hour)."""
    settings = settings or get_settings()
    sent = failed = 0
    with sessions() as s:
        due = s.scalars(select(LtiGradePost.id).where(LtiGradePost.state == "pending",
                                                      LtiGradePost.next_at <= now())).all()
    for post_id in due:
        with sessions() as s, s.begin():
            post = s.get(LtiGradePost, post_id, with_for_update=True)
            if post is None or post.state != "pending" or post.score is None:
                continue
            try:
                _post(post, LmsHttp(policy(settings, post.platform)), settings)
            except (outbound.OutboundFailed, LtiException, requests.RequestException, KeyError,
                    ValueError, TypeError, RecursionError) as exc:
                log.warning("grade post %d to %s failed: %s: %s", post.id, post.lineitem_url,
                            type(exc).__name__, exc)
                post.attempts += 1
                post.last_error = _shown(exc)
                post.next_at = now() + timedelta(seconds=min(RETRY_MAX_S, 15 * 2 ** post.attempts))
                failed += 1
                continue
            post.state, post.sent_at, post.last_error = "sent", now(), None
            sent += 1
    return sent, failed


def _shown(exc: Exception) -> str:
    """What the course's staff see of a failed post: which step failed and the LMS's status,
    never its answer."""
    if isinstance(exc, outbound.OutboundFailed):
        return exc.public
    if isinstance(exc, LtiServiceException):
        return f"the LMS answered HTTP {exc.response.status_code} (the server's log has more)"
    return f"the LMS's answer could not be used ({type(exc).__name__}; the server's log has more)"


def _post(post: LtiGradePost, http: requests.Session, settings: ServerSettings) -> None:
    connector = ServiceConnector(PlatformRegistration(post.platform, policy(settings, post.platform)),
                                 http)
    service = AssignmentsGradesService(connector, {"scope": post.scopes,  # type: ignore[typeddict-item]
                                                   "lineitem": post.lineitem_url})
    assert post.score is not None
    grade = (Grade().set_score_given(post.score).set_score_maximum(post.max_score)
             .set_timestamp(now().isoformat()).set_activity_progress("Completed")
             .set_grading_progress("FullyGraded").set_user_id(post.subject))
    service.put_grade(grade)


def posts(*, session: Session, course: Course) -> list[LtiGradePost]:
    return list(session.scalars(select(LtiGradePost).join(
        LtiPlatform, LtiPlatform.id == LtiGradePost.platform_id).where(
        LtiPlatform.course_id == course.id).order_by(LtiGradePost.id)))
