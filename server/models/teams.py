"""Teams: students who hand in one solution per assignment together (services/people/teams.py).

A team belongs to one assignment. Its members come and go: a membership has the time it began
and, once the student left, the time it ended, so a submission is shared by exactly the members
of its team at the moment it was made (a member who leaves keeps what was shared before; one
who joins shares only what comes after). A solo submission has no team.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy import DateTime, ForeignKey, Index, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from server.clock import now
from server.db import Base

if TYPE_CHECKING:
    from server.models.accounts import User
    from server.models.assignments import Assignment


class Team(Base):
    __tablename__ = "teams"
    __table_args__ = (UniqueConstraint("assignment_id", "name", name="uq_teams_assignment_name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    assignment_id: Mapped[int] = mapped_column(
        ForeignKey("assignments.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(80))
    join_code: Mapped[str] = mapped_column(String(32), unique=True)
    """What a student gives a classmate to join (members and staff read it)."""
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)
    deadline: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)
    """The team's own extension (services/grades/extensions.py): its submissions are late only
    after it; None: the assignment's deadline holds."""
    deadline_reason: Mapped[str] = mapped_column(String(500), default="", server_default="")

    assignment: Mapped[Assignment] = relationship()
    memberships: Mapped[list[TeamMember]] = relationship(
        back_populates="team", order_by="TeamMember.id")


class TeamMember(Base):
    """One student's time in a team: from `joined_at` until `left_at` (None: still in it)."""

    __tablename__ = "team_members"
    __table_args__ = (Index("ix_team_members_assignment_user", "assignment_id", "user_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"), index=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    assignment_id: Mapped[int] = mapped_column(ForeignKey("assignments.id", ondelete="CASCADE"))
    """The team's assignment, kept here so that "one team per assignment" is one lookup."""
    joined_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)
    left_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)

    team: Mapped[Team] = relationship(back_populates="memberships")
    user: Mapped[User] = relationship()
