"""Launching one sandbox over a stage: its mounts, its environment, its launcher line; and a
whole-program run of a script entry from launch to exit."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

from runners.nodes import gang
from runners.runs.failures import failure_from_exit
from runners.runs.runconfig import RunConfig
from runners.sandbox import ExitInfo, Mount, Running, SandboxSpec
from runners.sandbox.schedstat import RunDelaySampler

INSIDE_SUB = "/sub"
INSIDE_WORK = "/tmp/work"
INSIDE_CTL = "/run/paragrade"
INSIDE_RESULT = "/run/paragrade-result"
INSIDE_HARNESS = "/opt/paragrade/harness"
INSIDE_DATA = "/data"


def base_env(cfg: RunConfig, workdir_inside: str) -> dict[str, str]:
    """The sandbox's whole environment: nothing inherited, so no secret can leak in."""
    n = str(len(cfg.limits.cpus))
    env = {
        "PATH": f"{cfg.runtime_dir}/bin:/usr/bin:/bin",
        "HOME": workdir_inside,
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "OMP_NUM_THREADS": n,
        "OPENBLAS_NUM_THREADS": n,
        "MKL_NUM_THREADS": n,
        "NUMBA_NUM_THREADS": n,
        "NUMBA_CACHE_DIR": "/tmp/numba-cache",
        "MPLCONFIGDIR": "/tmp",
        "HYDRA_LAUNCHER": "fork",
        "UCX_LOG_LEVEL": "fatal",
        "HWLOC_HIDE_ERRORS": "2",
    }
    env.update(cfg.extra_env)
    return env


class Run:
    """One sandbox process over a stage, with its private work dir."""

    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg
        self.dir = cfg.stage.root / f"run-{uuid.uuid4().hex[:10]}"
        self.dir.mkdir(mode=0o711)
        self.work = self.dir / "work"
        self.work.mkdir(mode=0o700)
        if os.getuid() == 0:
            os.chown(self.work, cfg.sandbox_uid, cfg.sandbox_uid)
        ex = cfg.executor
        self.m_sub = Mount(cfg.code_dir, INSIDE_SUB)
        self.m_harness = Mount(cfg.stage.harness, INSIDE_HARNESS)
        self.m_work = Mount(self.work, INSIDE_WORK, writable=True)
        self.mounts = [self.m_sub, self.m_harness]
        if cfg.stage.data is not None:
            self.mounts.append(Mount(cfg.stage.data, INSIDE_DATA))
        self.mounts.extend(cfg.extra_mounts)
        self.python = f"{cfg.runtime_dir}/bin/python"
        self.entry = f"{ex.path(self.m_sub)}/{cfg.entry_file}"
        self.running: Running | None = None

    def launch(self, program: list[str], extra_mounts: list[Mount], *,
               ranks_end_together: bool = False) -> None:
        """Start `program` in the sandbox (on several nodes: runners.nodes.gang).
        `ranks_end_together`: the ranks serve until the run ends (the harness's calls), so a
        node whose ranks ended at all ends the run at once."""
        cfg = self.cfg
        if cfg.launcher == "mpirun":
            argv = [f"{cfg.runtime_dir}/bin/mpiexec", "-n", str(cfg.ranks), *program]
        elif cfg.launcher == "torchrun":
            argv = [f"{cfg.runtime_dir}/bin/torchrun", "--standalone",
                    f"--nproc-per-node={cfg.ranks}", *program[1:]]
        else:
            argv = program
        env = base_env(cfg, cfg.executor.path(self.m_work))
        # Processes the code starts itself (Ray's workers, a spawn pool) import it by name too.
        env["PYTHONPATH"] = cfg.executor.path(self.m_sub)
        if len(cfg.nodes) > 1 and cfg.launcher == "mpirun":
            self.running = gang.start(gang.Plan(
                nodes=tuple(cfg.nodes), ranks=cfg.ranks, executor=cfg.executor,
                runtime_dir=cfg.runtime_dir, limits=cfg.limits, owner_uid=cfg.sandbox_uid,
                dir=self.dir, mounts=self.mounts, harness=self.m_harness, work=self.m_work,
                python=self.python), program, extra_mounts, env,
                together=ranks_end_together)
            return
        spec = SandboxSpec(argv=argv, mounts=self.mounts + extra_mounts, workdir=self.m_work,
                           env=env, limits=cfg.limits)
        self.running = cfg.executor.start(spec)

    def ranks_end_apart(self) -> None:
        """From now on the ranks may end one by one (a session told its harness to exit)."""
        if isinstance(self.running, gang.GangRunning):
            self.running.together = False

    def finish(self, grace: float = 2.0) -> ExitInfo:
        assert self.running is not None
        info = self.running.wait(grace)
        if info is None:
            self.running.kill()
            info = self.running.wait(10)
        assert info is not None
        return info

    @property
    def proc(self) -> Running:
        assert self.running is not None, "not launched"
        return self.running

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


@dataclass
class ScriptResult:
    """What a script-style run left for the checker; every byte of it is untrusted."""

    returncode: int | None
    output: str
    files: dict[str, bytes]
    elapsed_s: float
    cpu_s: float | None = None  # the whole sandbox's, where the backend measures it
    waited_s: float | None = None  # its threads' wait for a CPU (read_run_delay; None: not read)


def _roots(run: Run, within_s: float = 2.0) -> list[tuple[str | None, int | None]]:
    """Each node's sandbox as its first process, once its cgroup lists it (a moment after the
    launch); None for a node this host cannot see."""
    deadline = time.monotonic() + within_s
    while True:
        roots = run.proc.roots()
        if (all(pid is not None for _, pid in roots) or time.monotonic() > deadline
                or not run.proc.alive()):
            return roots
        time.sleep(0.01)


def run_script(cfg: RunConfig, args: list[str], *, max_file_bytes: int = 64 << 20,
               read_run_delay: bool = False,
               watch: Callable[[list[tuple[str | None, int | None]]],
                               AbstractContextManager[object]] | None = None
               ) -> ScriptResult:
    """Run the code as a program (the launcher's way) and collect the files it wrote in out/.
    `read_run_delay`: sample its threads' wait for a CPU while it runs (the timed serial
    baseline's runs: other work on the node, `ScriptResult.waited_s`). `watch`: a context the
    run is waited for in, given each node's sandbox as its first process (a profile)."""
    run = Run(cfg)
    try:
        out = run.work / "out"
        out.mkdir()
        if os.getuid() == 0:
            os.chown(out, cfg.sandbox_uid, cfg.sandbox_uid)
        t0 = time.perf_counter_ns()
        run.launch([run.python, run.entry, *cfg.entry_args, *args], [])
        roots = _roots(run) if watch is not None else []
        with (RunDelaySampler(run.proc.pids) if read_run_delay else nullcontext()) as delays, \
                (watch(roots) if watch is not None else nullcontext()):
            info = run.finish(grace=cfg.limits.wall_s + 5)
        elapsed = (time.perf_counter_ns() - t0) / 1e9
        if info.timed_out or info.output_exceeded or info.disk_exceeded or info.oom_killed:
            raise failure_from_exit(info, cfg.limits.wall_s)
        files: dict[str, bytes] = {}
        for p in sorted(out.iterdir())[:64]:
            # Regular files only, read without following links the program may have planted.
            with contextlib.suppress(OSError):
                fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW)
                with os.fdopen(fd, "rb") as fh:
                    if os.fstat(fh.fileno()).st_size <= max_file_bytes:
                        files[p.name] = fh.read(max_file_bytes)
        return ScriptResult(info.returncode, info.output_excerpt, files, elapsed, info.cpu_s,
                            delays.waited_s if delays is not None else None)
    finally:
        run.remove()

