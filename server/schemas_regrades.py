"""Regrade requests' inputs and outputs (server/api/regrades.py, server/web/regrades.py)."""

from __future__ import annotations

from pydantic import Field, model_validator

from runners.protocol import MAX_ROW_ID
from server.schemas import Paragraphs, Public, UtcDatetime
from server.services.by_hand.regrade_requests import MAX_REASON_CHARS


class RegradeRequestIn(Paragraphs):
    """About one rubric item (`item_id`, applied or not), one test (`test_name`), or the
    performance points (`performance`)."""

    MULTILINE = frozenset({"reason"})
    reason: str = Field(min_length=1, max_length=MAX_REASON_CHARS)
    item_id: int | None = Field(default=None, ge=1, le=MAX_ROW_ID)
    test_name: str | None = Field(default=None, max_length=300)
    performance: bool = False


class RegradeRequestPublic(Public):
    id: int
    student: str | None = None
    assignment: str | None = None
    submission_id: int
    subject: str = Field(description="What it is about, in words")
    item_id: int | None
    item_title: str | None
    test_name: str | None
    performance: bool
    reason: str
    status: str
    answer: str | None
    changed: bool = Field(description="The answer applied or took off a rubric item")
    requeued: bool = Field(description="The answer queued the submission to be graded again")
    created_at: UtcDatetime
    answered_at: UtcDatetime | None


class RegradeAnswerIn(Paragraphs):
    MULTILINE = frozenset({"answer"})
    answer: str = Field(min_length=1, max_length=MAX_REASON_CHARS)
    apply_item: bool | None = Field(default=None, description="Apply the item asked about "
                                    "(true) or take it off (false); absent: as `apply`/`remove`")
    apply: list[int] = Field(default_factory=list, max_length=200,
                             description="Rubric items to apply to the grade (any of them)")
    remove: list[int] = Field(default_factory=list, max_length=200,
                              description="Rubric items to take off the grade")
    regrade: bool = Field(default=False, description="Queue the submission to be graded again "
                          "by the autograder (on the assignment's current version)")

    @model_validator(mode="after")
    def _one_way_each(self) -> RegradeAnswerIn:
        if set(self.apply) & set(self.remove):
            raise ValueError("an item is either applied or taken off, not both")
        if any(not 1 <= i <= MAX_ROW_ID for i in [*self.apply, *self.remove]):
            raise ValueError("a rubric item's id is a positive number")
        return self

    def items(self) -> dict[int, bool]:
        return {**{i: True for i in self.apply}, **{i: False for i in self.remove}}


class TestChoice(Public):
    name: str
    outcome: str


class ItemChoice(Public):
    id: int
    group: str
    title: str
    description: str
    points: float
    applied: bool | None = Field(description="Whether your released hand grade applied it "
                                 "(null: no hand grade released)")


class RegradeChoicesPublic(Public):
    submission_id: int | None = Field(description="The graded submission your grade stands on "
                                      "(null: nothing graded yet, nothing to ask about)")
    tests: list[TestChoice]
    items: list[ItemChoice]
    performance: bool = Field(description="Performance points are at stake")
    may_open: int = Field(description="How many more requests you may open now")
    requests: list[RegradeRequestPublic]
