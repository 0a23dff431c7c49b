"""Time as the server stores it: every stored time is UTC."""

from __future__ import annotations

from datetime import UTC, datetime


def now() -> datetime:
    return datetime.now(UTC)


def aware(dt: datetime) -> datetime:
    """A stored time with its zone: SQLite drops it, and every stored time is UTC."""
    return dt if dt.tzinfo is not None else dt.replace(tzinfo=UTC)
