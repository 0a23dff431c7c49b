"""Building one side's RunConfig from its package, this node and the runner's settings: the
launcher and rank count, the cores, limits, mounts and environment of its sandbox."""

from __future__ import annotations

from pathlib import Path

from runners.nodes import gang, overlay
from runners.nodes.hardware import host_cpus
from runners.package import Assignment
from runners.runs import batchscript, service
from runners.runs.runconfig import RunConfig
from runners.runs.stage import Stage
from runners.sandbox import Executor, Limits, Mount
from runners.settings import RunnerSettings, get_settings

SIMULATOR_PIDS = 1024 + 256
"""Under the CUDA simulator every simulated thread is an OS thread: a full block of 1024 threads
plus the harness, its pool and the runtime's own threads."""


def make_config(assignment: Assignment, *, executor: Executor, stage: Stage, code_dir: Path,
                cpus: list[int], workers: int, gpu_mode: str, serial: bool = False,
                settings: RunnerSettings | None = None) -> RunConfig:
    """How to run one side's code with `workers` workers (serial: the baseline's way)."""
    settings = settings or get_settings()
    m = assignment.manifest
    launcher = m.launcher.kind
    ranks = workers if launcher != "python" else 1
    entry_file, entry_args = m.entry.file, tuple[str, ...]()
    spans = len(gang.placement(ranks, m.resources.cores_per_node)) if m.resources.nodes > 1 else 1
    if launcher == "sbatch":  # the script says what runs, on how many nodes (checked)
        job = batch_job(assignment, code_dir)
        entry_file, entry_args = job.program, tuple(job.args)
        launcher, ranks, spans = "mpirun", job.tasks, job.nodes
    parallel = (ranks, spans)  # the parallel side's layout, which the baseline's cores follow
    if serial and launcher in ("mpirun", "torchrun"):  # the baseline: one plain process
        launcher, ranks, spans = "python", 1, 1
    use = cpus[: max(1, min(ranks if m.launcher.kind == "sbatch" else workers, len(cpus)))]
    if serial and parallel[1] > 1:
        use = local_cores(settings, *parallel) or use
    nodes: tuple[overlay.Node, ...] = ()
    if spans > 1 and launcher == "mpirun":
        held = gang.held_nodes(settings, host_cpus())
        if len(held) < spans:
            raise overlay.OverlayError(f"{spans} nodes are needed; this runner holds {len(held)}")
        nodes = tuple(held[:spans])
        use = list(nodes[0].cpus[: gang.spread(ranks, spans)[0]])
    env: dict[str, str] = {}
    mounts: tuple[Mount, ...] = ()
    if gpu_mode == "simulated":
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    elif gpu_mode == "real":  # the node's CUDA toolkit, where it is not under /usr
        env.update(settings.gpu_environment())
        mounts = tuple(Mount(p, str(p)) for p in settings.gpu_paths if p.is_dir())
    if m.service is not None:
        served = Mount(service.ensure(assignment, settings.scratch_dir), service.INSIDE)
        mounts += (served,)
        env["PARAGRADE_SERVICE"] = f"{executor.path(served)}/{service.SOCKET}"
    pids = m.resources.pids
    if gpu_mode == "simulated":
        pids = max(pids, SIMULATOR_PIDS)
    limits = Limits(
        cpus=tuple(use), memory_mb=m.resources.memory_mb, pids=pids,
        wall_s=float(m.resources.wall_seconds), output_bytes=settings.output_limit_bytes,
        disk_bytes=settings.disk_limit_bytes, fsize_bytes=settings.disk_limit_bytes,
        gpus=m.resources.gpus if gpu_mode == "real" else 0,
    )
    return RunConfig(executor=executor, runtime_dir=settings.runtime_dir, stage=stage,
                     code_dir=code_dir, entry_file=entry_file, launcher=launcher, ranks=ranks,
                     limits=limits, sandbox_uid=settings.sandbox_uid, extra_env=env,
                     extra_mounts=mounts, nodes=nodes, entry_args=entry_args)


def local_cores(settings: RunnerSettings, ranks: int, spans: int) -> list[int]:
    """The cores of this host that `ranks` ranks over `spans` held nodes take: a multi-node
    run's serial baseline is placed over them (runners/measure/placement.py), so that it sees the cores
    the ranks ran on, each node's, as on one node ([]: the nodes are not held). A node on
    another host (a SLURM cluster's second machine) adds none: the baseline runs here."""
    held = gang.held_nodes(settings, host_cpus())
    if len(held) < spans:
        return []
    cores: list[int] = []
    for k, (node, r) in enumerate(zip(held, gang.spread(ranks, spans), strict=False)):
        if k == 0 or node.host_netns is not None:
            cores += [c for c in (node.cpus[:r] or node.cpus) if c not in cores]
    return cores


def batch_job(assignment: Assignment, code_dir: Path) -> batchscript.BatchJob:
    """What the batch script in `code_dir` runs (ScriptRefused when it may not)."""
    m = assignment.manifest
    script = code_dir / m.entry.file
    if not script.is_file():
        raise batchscript.ScriptRefused(f"no batch script {m.entry.file} was handed in")
    files = {p.name for p in code_dir.iterdir() if p.is_file()}
    return batchscript.parse(script.read_text(errors="replace"), m.resources, files)
