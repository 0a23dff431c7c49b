"""What every message shares: the protocol's version and the frozen base model."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

PROTOCOL_VERSION = 5
"""2: reports carry the speedup credit and CPU figures, jobs the reference's speedup, checks a
figure (an older server refuses those fields: upgrade servers before runners). 5: a speedup
carries what the node delivered around its timed windows (`Interference`); the reference's
seconds per test go from validation to every grading (per-test time limits)."""


class Frozen(BaseModel):
    """Base for every message: immutable, unknown keys refused."""

    model_config = ConfigDict(frozen=True, extra="forbid")
