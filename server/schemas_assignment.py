"""An assignment's settings as its instructors change them (`PATCH`, the manage page)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BeforeValidator, ConfigDict, Field, field_validator

from server.schemas import Input, a_date_not_a_number, deadline_in_range


class AssignmentUpdate(Input):
    """Strict types: `true` is not a count, a number is not a deadline; a field it does not know
    is named in a 422 rather than ignored (a typo would otherwise change nothing, silently)."""

    model_config = ConfigDict(extra="forbid")

    deadline: Annotated[datetime | None, BeforeValidator(a_date_not_a_number)] = None
    late_policy: Literal["accept", "penalty", "reject"] | None = None
    late_penalty: float | None = Field(default=None, ge=0, le=1, strict=True)
    quota_count: int | None = Field(default=None, ge=1, le=10_000, strict=True)
    quota_window_s: int | None = Field(default=None, ge=60, le=30 * 86400, strict=True)
    speedup_min: float | None = Field(default=None, gt=0, le=1e6, strict=True,
                                      description="Scoring curve: stored grades are re-scored")
    speedup_full: float | None = Field(default=None, gt=0, le=1e6, strict=True)
    practice_per_hour: int | None = Field(default=None, ge=0, le=1000, strict=True,
                                          description="A student's practice runs per hour (0: "
                                          "practice off)")
    practice_per_day: int | None = Field(default=None, ge=0, le=10_000, strict=True)
    practice_timing: bool | None = Field(default=None, strict=True, description="Whether a "
                                         "practice run may ask for the short timing")
    practice_profiles: bool | None = Field(default=None, strict=True, description="Whether a "
                                           "practice run may ask for a profile")
    graded_profiles: bool | None = Field(default=None, strict=True, description="A profile "
                                         "after each graded grading's timing (runner time)")

    team_max: int | None = Field(default=None, ge=1, le=50, strict=True, description="Team work: "
                                 "teams of up to this many (1: individual work)")
    team_min: int | None = Field(default=None, ge=1, le=50, strict=True)
    teams_by_students: bool | None = Field(default=None, strict=True, description="Students "
                                           "create teams and join by code (else the staff)")
    team_lock_at: Annotated[datetime | None, BeforeValidator(a_date_not_a_number)] = Field(
        default=None, description="From then no membership changes (null: never locked)")

    _in_utc_range = field_validator("deadline", "team_lock_at")(staticmethod(deadline_in_range))
