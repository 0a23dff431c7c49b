"""LTI 1.3: registered LMS platforms, the LMS identities of accounts, launch data between an
LTI login and its launch, and the grades owed to LMS gradebooks."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from server.clock import now
from server.db import Base

if TYPE_CHECKING:
    from server.models.accounts import User
    from server.models.assignments import Assignment
    from server.models.courses import Course


class LtiPlatform(Base):
    """An LMS registered as an LTI 1.3 platform for one course: where its OIDC login, token
    endpoint and keys are, the deployments it may launch from, and the tool's own key pair for
    it (the private key signs the tool's requests to the LMS; its public key is in /lti/jwks)."""

    __tablename__ = "lti_platforms"
    __table_args__ = (UniqueConstraint("issuer", "client_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    course_id: Mapped[int] = mapped_column(ForeignKey("courses.id", ondelete="CASCADE"), index=True)
    issuer: Mapped[str] = mapped_column(String(500))
    client_id: Mapped[str] = mapped_column(String(200))
    auth_login_url: Mapped[str] = mapped_column(String(1000))
    auth_token_url: Mapped[str] = mapped_column(String(1000))
    key_set_url: Mapped[str] = mapped_column(String(1000))
    deployment_ids: Mapped[list[str]] = mapped_column(JSON)
    # Whether the server may fetch this LMS's keys, tokens and scores from loopback or private
    # addresses (a test LMS on the same machine); off, as any address an instructor types is
    # fetched on behalf of whoever starts a launch.
    allow_private_network: Mapped[bool] = mapped_column(Boolean, default=False,
                                                        server_default=false())
    tool_private_key: Mapped[str] = mapped_column(Text)
    tool_kid: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)

    course: Mapped[Course] = relationship()


class LtiIdentity(Base):
    """An account's identity on an LMS (its `sub` there): a launch finds the account by it.

    The LMS is its issuer *and* the key set that signs its launches: another registration that
    names the same issuer but signs with other keys (any instructor can register one) is
    another LMS, and reaches none of these accounts."""

    __tablename__ = "lti_identities"
    __table_args__ = (UniqueConstraint("issuer", "key_set_url", "subject"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    issuer: Mapped[str] = mapped_column(String(500))
    key_set_url: Mapped[str] = mapped_column(String(1000))
    subject: Mapped[str] = mapped_column(String(255))
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    email: Mapped[str | None] = mapped_column(String(320), default=None)
    """The email the LMS asserted at the last launch: unverified, shown to the course's staff;
    the account owns it only where the operator trusts this LMS for its domain."""


class LtiLaunchData(Base):
    """What an LTI login leaves for its launch (state, nonce), with an expiry: the launch
    comes back cross-site, where the browser withholds the session cookie. A nonce is used
    once (its row is deleted by the launch that uses it)."""

    __tablename__ = "lti_launch_data"

    key: Mapped[str] = mapped_column(String(300), primary_key=True)
    value: Mapped[Any] = mapped_column(JSON)
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)


class LtiGradePost(Base):
    """A student's grade for one assignment owed to an LMS gradebook (AGS): the latest score,
    posted by the reaper, retried until the LMS takes it; never dropped."""

    __tablename__ = "lti_grade_posts"
    __table_args__ = (UniqueConstraint("platform_id", "user_id", "assignment_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    platform_id: Mapped[int] = mapped_column(ForeignKey("lti_platforms.id", ondelete="CASCADE"),
                                             index=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    assignment_id: Mapped[int] = mapped_column(ForeignKey("assignments.id", ondelete="CASCADE"),
                                               index=True)
    subject: Mapped[str] = mapped_column(String(255))
    lineitem_url: Mapped[str] = mapped_column(String(1000))
    scopes: Mapped[list[str]] = mapped_column(JSON)
    score: Mapped[float | None] = mapped_column(Float, default=None)
    max_score: Mapped[float] = mapped_column(Float, default=100.0)
    state: Mapped[str] = mapped_column(String(16), default="idle", index=True)  # idle|pending|sent
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_error: Mapped[str | None] = mapped_column(Text, default=None)
    next_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)
    sent_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)

    platform: Mapped[LtiPlatform] = relationship()
    user: Mapped[User] = relationship()
    assignment: Mapped[Assignment] = relationship()
