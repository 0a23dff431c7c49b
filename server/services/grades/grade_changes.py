"""A grade changed: what follows from it, in the caller's transaction.

Every change to a stored grade passes here (a report lands, a regrade replaces one, an
instructor reviews a speedup, an extension restates lateness, a new scoring curve rescores):
the leaderboard chooses the student's board submission again, then what each LMS gradebook is
owed follows the board, and the students are told what moved (services/notices/follow.py).
Those who change grades call this module and know nothing of its followers; the leaderboard,
the LMS passback and the notices know nothing of each other or of who changed the grade.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from server.models import Submission
from server.services.grades import leaderboard
from server.services.lti import passback
from server.services.notices import follow
from server.services.people import teams


def of_student(*, session: Session, assignment_id: int, user_id: int) -> None:
    """One student's grade of one assignment may have changed."""
    leaderboard.refresh(session=session, assignment_id=assignment_id, user_id=user_id)
    passback.grade_changed(session=session, assignment_id=assignment_id, user_id=user_id)


def of_submission(*, session: Session, submission: Submission) -> None:
    """A submission's grade may have changed: each student who shares it (its uploader, or
    its team's members then: people/teams.py) may have a new grade."""
    for user_id in teams.sharers_of(session=session, submission_id=submission.id):
        of_student(session=session, assignment_id=submission.assignment_id, user_id=user_id)
    follow.submission(session=session, sub=submission)


def of_everyone(*, session: Session, assignment_id: int) -> None:
    """Every student's grade of one assignment may have changed."""
    leaderboard.rebuild(session=session, assignment_id=assignment_id)
    passback.grade_changed(session=session, assignment_id=assignment_id)
    follow.assignment(session=session, assignment_id=assignment_id)
