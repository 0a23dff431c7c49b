"""The SLURM backend: each job is graded on a compute node, in an allocation of its own.

The runner stays on the login node (HTTP to the server, the broker). For a job it writes the
submission next to the cached package in the scratch dir, which must be on a filesystem the
compute nodes share, and runs the engine there through `srun`: `paragrade grade … --json` (or
`assignments validate … --json`) with the inner sandbox backend (bwrap by default). The allocation
takes the whole node (`--exclusive`) unless told otherwise, so that no other job shares the cores
a speedup is timed on. Only named variables cross into the job (`--export`): never the runner's
token. The JSON the engine prints is validated like any other message.

An [array] package's engine job takes one core and submits the tasks as an `sbatch --array`
from its node (runners/runs/array.py); each task gets an allocation of its own.

A package whose ranks span nodes (`resources.nodes` > 1) gets one allocation of that many whole
nodes (`salloc --nodes=N --exclusive`); the engine runs on its first node and starts the other
nodes' sandboxes as steps of the same job (`srun --overlap`, runners/nodes/nodeagent.py). Their
network is the job's overlay, made on every node by the prolog in containers/slurm/ (root's work:
a namespace and a VXLAN device per job) and removed by the epilog.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

from pydantic import ValidationError

from runners import package
from runners.nodes.gang import JOB_NAME_PREFIX
from runners.protocol import GradeReport, Practice, ValidationCheck
from runners.settings import RunnerSettings

log = logging.getLogger("paragrade.slurm")


class SlurmError(RuntimeError):
    """SLURM could not run the job (not the submission's fault)."""


def available() -> str | None:
    """Why SLURM cannot be used from here, or None."""
    for tool in ("srun", "sinfo"):
        if shutil.which(tool) is None:
            return f"{tool} is not on PATH (this is not a SLURM login node)"
    r = subprocess.run(["sinfo", "-h", "-o", "%P %c %D"], capture_output=True, text=True,
                       timeout=30)
    if r.returncode != 0:
        return f"sinfo failed: {r.stderr.strip()[:300]}"
    return None


def cores_per_node(settings: RunnerSettings) -> int:
    """The most CPUs a node of the partition offers (what the fleet lists as this runner's cores)."""
    args = ["sinfo", "-h", "-o", "%c"] + (["-p", settings.slurm_partition]
                                          if settings.slurm_partition else [])
    r = subprocess.run(args, capture_output=True, text=True, timeout=30)
    numbers = [int(x.rstrip("+")) for x in r.stdout.split() if x.rstrip("+").isdigit()]
    return max(numbers, default=1)


def export(settings: RunnerSettings) -> str:
    """`--export=…` for a job running the engine: named settings only, never the runner's token.

    The engine there may submit job arrays of its own ([array] packages), so it also learns
    where the cluster's configuration is."""
    env = {"PATH": settings.slurm_path,
           "PARAGRADE_BACKEND": settings.slurm_inner_backend,
           "PARAGRADE_RUNTIME_DIR": str(settings.runtime_dir),
           "PARAGRADE_GPU_MODE": settings.gpu_mode,
           "PARAGRADE_TIMING_BUDGET_S": str(settings.timing_budget_s),
           "PARAGRADE_ARRAY_LAUNCHER": "slurm"}
    if settings.scratch_dir is not None:
        env["PARAGRADE_SCRATCH_DIR"] = str(settings.scratch_dir)
    if settings.slurm_partition:
        env["PARAGRADE_SLURM_PARTITION"] = settings.slurm_partition
    if settings.slurm_conf is not None:
        env["SLURM_CONF"] = str(settings.slurm_conf)
    if settings.standin_nodes:
        env["PARAGRADE_STANDIN_NODES"] = str(settings.standin_nodes)
    if any("," in v for v in env.values()):
        raise SlurmError("an exported setting contains a comma, which --export cannot carry")
    return "--export=" + ",".join(f"{k}={v}" for k, v in env.items())


def _srun(settings: RunnerSettings, assignment: package.Assignment, name: str,
          time_limit_s: int, engine_args: list[str]) -> list[str]:
    """srun with the allocation the package asks for, running `paragrade ENGINE_ARGS` in it."""
    res = assignment.manifest.resources
    # An [array] package's work runs in the array's own allocations: the engine needs one core.
    cores = 1 if assignment.manifest.array is not None else res.cores
    argv = ["srun", f"--job-name={name}", "--nodes=1", "--ntasks=1",
            f"--cpus-per-task={cores}", f"--time={math.ceil(time_limit_s / 60) + 1}",
            export(settings), "--quiet"]
    # The engine itself (pytest, timing) needs memory beside the submission's own cap.
    argv += (["--exclusive", "--mem=0"] if settings.slurm_exclusive and cores == res.cores
             else [f"--mem={res.memory_mb * 2 + 1024}M"])
    if settings.slurm_partition:
        argv.append(f"--partition={settings.slurm_partition}")
    if res.kind == "gpu" and res.gpus:
        argv.append(f"--gres=gpu:{res.gpus}")
    python = settings.slurm_python or sys.executable
    engine = [*settings.slurm_args, python, "-m", "paragrade.cli", *engine_args]
    if res.nodes > 1:
        # One allocation of every node, the engine as a step on its first: the other nodes'
        # sandboxes become steps of the same job (the engine's srun --overlap).
        alloc = ["salloc", f"--job-name={name}", f"--nodes={res.nodes}", "--exclusive",
                 "--mem=0", f"--time={math.ceil(time_limit_s / 60) + 1}", "--quiet"]
        if settings.slurm_partition:
            alloc.append(f"--partition={settings.slurm_partition}")
        return [*alloc, "srun", "--nodes=1", "--ntasks=1", export(settings), "--quiet", *engine]
    return [*argv, *engine]


def _run(argv: list[str], name: str, timeout_s: float) -> str:
    """Run srun; its stdout. On any interruption (a cancelled job too) the job is cancelled."""
    log.info("srun: %s", " ".join(argv))
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except BaseException:
        proc.terminate()  # srun passes it on to the job step
        subprocess.run(["scancel", f"--name={name}"], capture_output=True, timeout=30)
        proc.wait(30)
        raise
    if proc.returncode != 0 and not out.strip():
        raise SlurmError(f"srun exited with {proc.returncode}: {err.strip()[-1500:]}")
    return out


def grade(assignment: package.Assignment, files: dict[str, bytes], *, settings: RunnerSettings,
          time_limit_s: int, tag: str = "", with_timing: bool = True,
          reference_speedup: float | None = None, timing_only: bool = False,
          timing_share: float = 1.0, practice: Practice | None = None,
          profile: bool = False) -> GradeReport:
    """Grade on a compute node, as grader.grade would here (anchored to `reference_speedup`; a
    final run's turn: `timing_only` on `timing_share` of the budget); SlurmError when SLURM or
    the engine there failed."""
    work = (settings.scratch_dir or Path("/tmp")) / "paragrade-slurm" / uuid.uuid4().hex
    sub = work / "submission"
    sub.mkdir(parents=True)
    try:
        paths = []
        for fname, content in files.items():
            if "/" in fname or fname.startswith("."):
                raise SlurmError(f"unexpected file name in the submission: {fname!r}")
            (sub / fname).write_bytes(content)
            paths.append(str(sub / fname))
        work.chmod(0o755)
        name = f"{JOB_NAME_PREFIX}{tag or work.name[:8]}"
        argv = _srun(settings, assignment, name, time_limit_s,
                     ["grade", str(assignment.root), *paths, "--json",
                      *([] if with_timing else ["--no-timing"]),
                      *([] if reference_speedup is None
                        else ["--reference-speedup", f"{reference_speedup!r}"]),
                      *(["--timing-only", "--timing-share", f"{timing_share!r}"]
                        if timing_only else []),
                      *(["--practice", practice] if practice is not None else []),
                      *(["--profile"] if profile else [])])
        out = _run(argv, name, time_limit_s + 120)
        try:
            return GradeReport.model_validate_json(out)
        except ValidationError as exc:
            raise SlurmError(f"the engine on the node printed no report: {out[-500:]!r}") from exc
    finally:
        shutil.rmtree(work, ignore_errors=True)


def validate(assignment: package.Assignment, *, settings: RunnerSettings, time_limit_s: int,
             tag: str = "") -> list[ValidationCheck]:
    """Validate a package on a compute node."""
    name = f"{JOB_NAME_PREFIX}{tag or 'validate'}"
    argv = _srun(settings, assignment, name, time_limit_s,
                 ["assignments", "validate", str(assignment.root), "--json"])
    out = _run(argv, name, time_limit_s + 120)
    try:
        return [ValidationCheck.model_validate(c) for c in json.loads(out)]
    except (ValueError, ValidationError, TypeError) as exc:
        raise SlurmError(f"the engine on the node printed no checks: {out[-500:]!r}") from exc
