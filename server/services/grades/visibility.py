"""When a student reads a hidden test's whole message. A runner sends, for each failed hidden
test, the message its author wrote on purpose (or "wrong answer") and, held apart, the message a
visible test would carry: the assertion's values, the traceback of the student's code
(`held_message`). Which one a reader gets:

- **staff** (the course's instructors and TAs) get both, always;
- **the student** gets the whole message where the test is revealed: "always", or
  "after_deadline" once their own deadline (extensions included) has passed and no late
  submission can earn points any more (late policy reject, or a 100 % penalty: else the values
  would earn late points); else only the message written on purpose, as before.

Per test, the package's `[feedback] tests` decides; else the course offering's choice for the
assignment (`hidden_tests_shown`); else the package's `[feedback] hidden_tests` ("never" by
default)."""

from __future__ import annotations

import copy
from typing import Any, get_args

from pydantic import ValidationError
from sqlalchemy.orm import Session

from runners.protocol import Manifest, Shown
from server.models import Assignment, AuditLog, Submission, User, now
from server.services.grades import extensions, grading
from server.services.records.errors import Forbidden, Invalid

MODES = get_args(Shown)


def mode(assignment: Assignment, manifest: Manifest | None, test: str) -> str:
    """When the student reads this hidden test's whole message."""
    feedback = manifest.feedback if manifest is not None else None
    if feedback is not None and test in feedback.tests:
        return feedback.tests[test]
    if assignment.hidden_tests_shown is not None:
        return assignment.hidden_tests_shown
    return feedback.hidden_tests if feedback is not None else "never"


def for_reader(*, session: Session, sub: Submission, report: dict[str, Any] | None,
               staff: bool) -> dict[str, Any] | None:
    """The stored report as this reader may read it."""
    if report is None or staff:
        return report
    held = [t for t in report.get("tests", []) if t.get("held_message")]
    if not held:
        return report
    a = sub.assignment
    try:
        manifest: Manifest | None = Manifest.model_validate(sub.version.manifest)
    except ValidationError:  # a package stored before [feedback] existed reads as "never"
        manifest = None
    deadline = extensions.deadline_for(session=session, assignment=a, user_id=sub.user_id)
    # Passed for good: a student who can still earn points by submitting (a late submission
    # accepted, or with a penalty under 100 %) could use the values to resubmit.
    passed = extensions.passed(deadline, now()) and not grading.late_work_earns(a)
    out = copy.deepcopy(report)
    for t in out.get("tests", []):
        whole = t.pop("held_message", None)
        shown = mode(a, manifest, t.get("name", ""))
        if whole and (shown == "always" or (shown == "after_deadline" and passed)):
            t["message"] = whole
    return out


def set_mode(*, session: Session, assignment: Assignment, actor: User, role: str | None,
             shown: str | None) -> None:
    """The course offering's choice (None: the package's); instructors only."""
    if role != "instructor":
        raise Forbidden("only the course's instructors decide when hidden tests are shown")
    if shown is not None and shown not in MODES:
        raise Invalid(f"hidden tests are shown {', '.join(MODES)} (or as the package says)")
    if shown == "after_deadline" and grading.late_work_earns(assignment):
        raise Invalid(
            f"late submissions earn points here (late policy {assignment.late_policy}): after "
            "the deadline a student could read the hidden tests' values and resubmit for "
            "points. Set the late policy to reject (or a 100 % penalty) first, or choose "
            "never or always")
    assignment.hidden_tests_shown = shown
    session.add(AuditLog(actor_id=actor.id, action="feedback.hidden_tests",
                         target=f"{assignment.course.slug}/{assignment.slug}",
                         detail={"shown": shown}))
    session.flush()
