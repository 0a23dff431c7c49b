"""What every message shares: the protocol's version and the frozen base model."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

PROTOCOL_VERSION = 10
"""2: reports carry the speedup credit and CPU figures, jobs the reference's speedup, checks a
figure (an older server refuses those fields: upgrade servers before runners). 5: a speedup
carries what the node delivered around its timed windows (`Interference`); the reference's
seconds per test go from validation to every grading (per-test time limits). 6: a speedup may be
anchored to the reference (`Anchor`). 7: a job may be a final run's timing only
(`timing_only`, `timing_share`). 8: a credit may be `pending` (the node was busy); the node's
state says how long its probes waited for a CPU and the CPU pressure, a hello carries the
pressure. 9: a job may be a practice run (`practice`: the public tests only, never graded), its
report says so (an older runner would grade it in full: hidden tests and all). 10: a profile
carries threads and nodes, a flame graph's stacks, a GPU call's kernels and copies, and its cost;
a graded job may ask for a profile after its timing (`GradeJob.profile` on a graded job)."""


class Frozen(BaseModel):
    """Base for every message: immutable, unknown keys refused."""

    model_config = ConfigDict(frozen=True, extra="forbid")
