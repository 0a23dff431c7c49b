"""The kinds of notification, what each is about, and its e-mail by default (a user chooses per
kind: off, at once, or in a daily digest)."""

from __future__ import annotations

from typing import Literal, get_args

Email = Literal["off", "now", "digest"]
EMAILS: tuple[str, ...] = get_args(Email)

KINDS: dict[str, tuple[str, Email]] = {
    "graded": ("a submission's grade landed (when its grading took longer than you chose)", "now"),
    "grade_changed": ("a grade changed: a regrade, a review of a speedup, the final run", "now"),
    "final_run": ("the final run after the deadline settled your grade", "now"),
    "regrade_answered": ("the staff answered a regrade request", "now"),
    "manual_released": ("grades by hand were released", "now"),
    "deadline": ("a deadline 24 hours away, while you have no passing submission", "now"),
    "announcement": ("an announcement from a course's staff", "now"),
}
"""Kind → (what it is about, in the preferences page's words; its e-mail by default)."""

GRADE_WAIT_S = 120
"""A grade that landed is told when its grading took longer than this, by default: a student who
waited in the page has seen it already."""
