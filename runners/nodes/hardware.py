"""What this runner's hardware offers a grading: its cores, its GPUs, the nodes of its gang."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

from runners.nodes import gang, overlay
from runners.package import Assignment
from runners.sandbox import Executor
from runners.settings import RunnerSettings


def host_cpus() -> list[int]:
    """The CPUs this runner may use (its affinity), in order."""
    return sorted(os.sched_getaffinity(0))


def gpu_present() -> str | None:
    """The first GPU's model when this node has an NVIDIA GPU, else None."""
    if not Path("/dev/nvidia0").exists() or shutil.which("nvidia-smi") is None:
        return None
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
        return out.splitlines()[0].strip() if out.strip() else None
    return None


def gpu_count() -> int:
    """How many NVIDIA GPUs this node shows."""
    return len(list(Path("/dev").glob("nvidia[0-9]*")))


def decide_gpu_mode(assignment: Assignment, settings: RunnerSettings) -> str:
    """'none' for CPU work; 'real' with a GPU; 'simulated' where allowed; 'unavailable' otherwise."""
    if assignment.manifest.resources.kind != "gpu":
        return "none"
    mode = settings.gpu_mode
    if mode == "auto":
        mode = "real" if gpu_present() else "simulated"
    if mode == "simulated" and not assignment.manifest.resources.simulate_gpu:
        return "unavailable"
    if mode == "none":
        return "unavailable"
    return mode


def allotment(assignment: Assignment) -> tuple[list[int], str | None]:
    """The CPUs timed runs use (of one node), and a note when this runner has fewer than asked."""
    cpus = host_cpus()
    want = assignment.manifest.resources.cores_per_node
    if want > len(cpus):
        return cpus, f"the assignment asks for {want} cores; this runner has {len(cpus)}"
    return cpus[:want], None


def gang_problem(assignment: Assignment, executor: Executor, settings: RunnerSettings
                 ) -> tuple[str | None, list[overlay.Node]]:
    """Why this runner cannot grade a multi-node package (None: it can), and the nodes it holds."""
    want = assignment.manifest.resources.nodes
    if want < 2:
        return None, []
    if not executor.joins_netns:
        return f"the {executor.name} backend cannot run multi-node jobs (bwrap can)", []
    if why := overlay.available():
        return why, []
    try:
        held = gang.held_nodes(settings, host_cpus())
    except overlay.OverlayError as exc:
        return str(exc), []
    if len(held) < want:
        return f"the assignment spans {want} nodes; this runner holds {len(held)}", held
    return None, held[:want]
