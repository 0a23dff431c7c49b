"""HTTP routers, one module per area."""

from typing import Annotated

from fastapi import Path

from server.services import MAX_ROW_ID

RowId = Annotated[int, Path(ge=1, le=MAX_ROW_ID)]
"""An id in a path: out of range is a 422, never a database error."""
