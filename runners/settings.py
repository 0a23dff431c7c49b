"""Runner-side settings: the one place that reads the environment."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from runners.protocol.backends import RunnerBackend

REPO_ROOT = Path(__file__).resolve().parent.parent


class RunnerSettings(BaseSettings):
    """Settings of a grading process (CLI or runner worker), from PARAGRADE_* variables."""

    model_config = SettingsConfigDict(env_prefix="PARAGRADE_", extra="ignore")

    assignments_dir: Path = Field(default=REPO_ROOT / "assignments")
    runtime_dir: Path = Field(
        default=Path("/opt/paragrade/runtime"),
        description="The sandbox's Python venv (world-readable; built by scripts/setup.sh)",
    )
    backend: RunnerBackend = "auto"
    scratch_dir: Path | None = Field(
        default=None, description="Where per-run work dirs are made (default: system temp)"
    )
    sandbox_uid: int = Field(default=65534, description="User the sandbox runs as when root")
    fork_tests: bool = Field(default=True, description="A grading's tests of a plain-Python "
                             "function entry run as children forked from one sandbox's zygote "
                             "(runners/harness/zygote.py); false: a fresh sandbox per test")
    jit_cache: bool = Field(default=True, description="Those tests' children share numba's "
                            "compiled code within the grading (runners/harness/jitcache.py); "
                            "false: each test compiles")
    output_limit_bytes: int = 8 * 1024 * 1024
    disk_limit_bytes: int = 256 * 1024 * 1024
    timing_budget_s: float = Field(default=30.0, gt=0, description="Cap on the time of one "
                                   "grading's timed runs (the package's timing.budget_s, at most)")
    timing_probe: bool = Field(default=True, description="Probe the node's cores around each "
                               "timed window and time again those it found short "
                               "(runners/measure/capacity.py); false: every window counts")
    baseline_placement: bool = Field(default=True, description="Pin the serial baseline's timed "
                                     "calls to each allotted core in turn (runners/measure/placement.py); "
                                     "false: the kernel places it, as before the rule")
    anchor: bool = Field(default=False, description="Time the submission beside the package's "
                         "reference on the same cores and anchor its speedup to the reference's "
                         "validated one (runners/measure/anchor.py), where one is known; off: "
                         "the plain ratio to the serial baseline (what each gains and costs: "
                         "docs/instructors/speedup-credit.md)")
    busy_node: Literal["wait", "time-anyway"] = Field(
        default="wait", description="A grading whose node stayed busy while it was timed: "
        "'wait': its tests count, its performance points wait for a timing on a free node; "
        "'time-anyway': the busy figure earns points and the report's headline says so (a "
        "one-runner course that cannot wait)")
    calibration_file: Path = Field(
        default=REPO_ROOT / "var" / "runner" / "calibration.json",
        description="The host's idle cores (`paragrade runner calibrate`; runners/measure/"
        "calibration.py): every capacity probe is compared with it")
    calibrate_at_start: bool = Field(default=True, description="A runner calibrates its cores "
                                     "as it starts where the node is idle")
    calibration_kept_s: float = Field(
        default=3600.0, ge=0, description="A runner that finds this host's calibration of "
        "every core made less than this long ago keeps it at its start instead of spinning "
        "the cores again (0: calibrate at every start)")
    wait_for_server_s: float = Field(
        default=0.0, ge=0, le=600, description="At start, wait up to this long for the server "
        "to take the runner's hello before calibrating (the one-command start sets it: its "
        "server starts beside the runner, and a calibration made while it starts reads its "
        "cores slow)")
    gpu_mode: Literal["auto", "real", "simulated", "none"] = "auto"
    gpu_env: list[str] = Field(
        default=["CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH"],
        description="Variables of the runner's environment a GPU sandbox gets (where the node's "
                    "CUDA toolkit is, e.g. numba-cuda's libnvvm); name no secret here")
    gpu_paths: list[Path] = Field(
        default=[], description="Host folders a GPU sandbox also sees, read-only, at the same "
                                "path (a CUDA toolkit outside /usr, e.g. /opt/cuda)")
    docker_url: str | None = Field(default=None, description="Docker API URL (podman's works)")
    standin_nodes: int = Field(
        default=0, ge=0, le=16, description="Hold this many stand-in nodes for multi-node MPI "
        "runs: network namespaces of this host joined by a bridge, this runner's cores split "
        "between them (runners/nodes/overlay.py); 0: multi-node packages are not served here")

    def gpu_environment(self) -> dict[str, str]:
        """The runner's values of the `gpu_env` variables (those it has)."""
        return {k: os.environ[k] for k in self.gpu_env if k in os.environ}

    docker_image: str = "paragrade/runner-cpu:latest"
    apptainer_image: str | None = None
    apptainer_bin: str = "apptainer"
    runner_server: str | None = Field(default=None, description="Server URL a runner serves")
    runner_token: str | None = Field(
        default=None, description="This runner's credential (`paragrade admin runner add NAME` "
                                  "on the server), or the fleet token of a development start")
    runner_name: str | None = Field(
        default=None, description="How the fleet lists this runner: a credential's name "
                                  "(default: host-pid, which only the fleet token may use)")
    broker_url: str | None = Field(default=None, description="Celery broker the runner consumes "
                                   "(redis://… or the server's embedded sqla+sqlite:///…)")
    broker_key_prefix: str = Field(default="", description="Redis key prefix of the deployment")
    heartbeat_s: float = Field(default=10.0, gt=0, description="How often a runner reports")
    cpus: str | None = Field(default=None, description="The cores this runner grades on, e.g. "
                             "'0-7' (several runners on one node each take their own slice)")
    array_launcher: Literal["local", "slurm"] = Field(
        default="local", description="How [array] packages' tasks run: concurrent local "
        "sandboxes, or an sbatch --array (set on the nodes by the SLURM backend)")
    slurm_conf: Path | None = Field(default=None, validation_alias="SLURM_CONF",
                                    description="SLURM's own SLURM_CONF, passed on to the jobs "
                                                "that submit arrays")
    slurm_array_task_id: int | None = Field(default=None,
                                            validation_alias="SLURM_ARRAY_TASK_ID",
                                            description="Set by SLURM in an array task")
    slurm_job_id: str | None = Field(default=None, validation_alias="SLURM_JOB_ID",
                                     description="Set by SLURM where the engine runs in a job")
    slurm_job_nodelist: str | None = Field(default=None, validation_alias="SLURM_JOB_NODELIST",
                                           description="The job's nodes (set by SLURM)")
    slurm_nodelist: str | None = Field(default=None, validation_alias="SLURM_NODELIST",
                                       description="The job's nodes, as a prolog is told them")
    slurmd_nodename: str | None = Field(default=None, validation_alias="SLURMD_NODENAME",
                                        description="The node this runs on (set by SLURM)")
    slurm_partition: str | None = Field(default=None, description="Partition jobs go to")
    slurm_exclusive: bool = Field(default=True, description="Whole node per job (timed cores "
                                  "are never shared)")
    slurm_inner_backend: Literal["bwrap", "apptainer", "process"] = Field(
        default="bwrap", description="The sandbox the engine uses on the compute node")
    slurm_path: str = Field(default="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                            description="PATH of the engine in the job (where bwrap, prlimit… are)")
    slurm_python: str | None = Field(default=None, description="Python with paragrade on the "
                                     "compute nodes (default: the runner's own)")
    slurm_args: list[str] = Field(default_factory=list, description="Extra srun arguments "
                                  "(JSON list), e.g. [\"--account=hpc101\"]")


@lru_cache
def get_settings() -> RunnerSettings:
    """The process's settings, read once."""
    return RunnerSettings()
