"""How one side's code is started: the RunConfig every run of it (session, script, array) reads."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from runners.nodes.overlay import Node
from runners.runs.stage import Stage
from runners.sandbox import Executor, Limits, Mount


@dataclass(frozen=True)
class RunConfig:
    """How to start one side's code: launcher, worker count, confinement."""

    executor: Executor
    runtime_dir: Path
    stage: Stage
    code_dir: Path
    entry_file: str
    launcher: str  # python | mpirun | torchrun
    ranks: int
    limits: Limits
    sandbox_uid: int = 65534
    extra_env: dict[str, str] = field(default_factory=dict)
    extra_mounts: tuple[Mount, ...] = ()
    entry_args: tuple[str, ...] = ()
    """Arguments the program always gets first (those of a batch script's launch line)."""
    nodes: tuple[Node, ...] = ()
    """Several: an MPI run with its ranks spread over these nodes, one sandbox each
    (runners/nodes/gang.py); none or one: one sandbox on this node."""

def with_wall(cfg: RunConfig, wall_s: float | None) -> RunConfig:
    """`cfg` with a wall limit of at most `wall_s` (None: as it is): one test's own limit."""
    if wall_s is None or wall_s >= cfg.limits.wall_s:
        return cfg
    return replace(cfg, limits=replace(cfg.limits, wall_s=wall_s))
