"""Practice runs' inputs (server/api/practice.py, server/web/manage.py)."""

from __future__ import annotations

from pydantic import AwareDatetime, Field

from server.schemas import Input


class PauseIn(Input):
    until: AwareDatetime | None = Field(description="No student's practice run is taken until "
                                        "then, with a time zone (null: again now)")
