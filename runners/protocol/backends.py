"""The runner's backends, named once: the runner's settings, the CLI's help, the report's
environment, the operators' table (docs/operators/runners.md) and the tests read them here."""

from __future__ import annotations

from typing import Literal, get_args

SandboxBackend = Literal["bwrap", "process", "docker", "apptainer"]
"""What confines one run (runners/sandbox/): the names `create_executor` takes."""
SANDBOX_BACKENDS: tuple[str, ...] = get_args(SandboxBackend)
RunnerBackend = Literal["auto", "slurm"] | SandboxBackend
"""A runner's choice: a sandbox backend, `auto` (bwrap where bubblewrap is installed), or
`slurm` (each job graded on a compute node, runners/nodes/slurm.py)."""
RUNNER_BACKENDS: tuple[str, ...] = ("auto", *SANDBOX_BACKENDS, "slurm")
