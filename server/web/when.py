"""Dates and times on the pages' forms: a date-time picker (`datetime-local`, which has no zone)
beside a chosen time zone, turned into one moment (stored in UTC); a value with its own offset
(`2026-12-01T23:59+01:00`, as the API takes it) is read as it is."""

from __future__ import annotations

import functools
import zoneinfo
from datetime import UTC, datetime

DEFAULT_ZONE = "UTC"


@functools.cache
def zones() -> list[str]:
    """Every time zone the picker offers, UTC first."""
    return [DEFAULT_ZONE, *sorted(z for z in zoneinfo.available_timezones() if z != DEFAULT_ZONE)]


def moment(local: str, zone: str, iso: str = "") -> datetime | None:
    """The moment a form gives (None: left empty); ValueError naming what is wrong."""
    if iso.strip():
        value = datetime.fromisoformat(iso.strip())
        if value.tzinfo is None:
            raise ValueError("use a date and time with a zone, e.g. 2026-12-01T23:59+01:00")
        return value
    if not local.strip():
        return None
    if zone not in zones():
        raise ValueError(f"no time zone {zone!r}")
    return datetime.fromisoformat(local.strip()).replace(tzinfo=zoneinfo.ZoneInfo(zone))


def local_of(value: datetime | None, zone: str = DEFAULT_ZONE) -> str:
    """`value` as the picker shows it in `zone` ('' for none)."""
    if value is None:
        return ""
    aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    shown = zoneinfo.ZoneInfo(zone if zone in zones() else DEFAULT_ZONE)
    return aware.astimezone(shown).strftime("%Y-%m-%dT%H:%M")
