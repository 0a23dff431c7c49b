"""Job arrays: a submission's task function run as N independent sandboxes, gathered in order.

An `[array]` package's entry is one task, `function(task_id=i, n_tasks=N, **inputs)`. The engine
runs the tasks the way a cluster would: every task is a fresh sandbox on one core, at most
`concurrency` at a time, and the makespan runs from the first task's start to the last task's
end, sandbox start-up and import included (an array task is a new process on a real cluster
too). Two launchers:

- local: concurrent sandboxes on this runner's cores, one core per slot;
- slurm (`PARAGRADE_ARRAY_LAUNCHER=slurm`): one `sbatch --array=0-(N-1)%concurrency`; each task
  runs `python -m runners.runs.array` on its node, a trusted process that starts the sandbox, makes the
  call and writes the value and its own start and end times to the shared scratch folder. A
  cluster's scheduler leaves gaps of seconds between tasks (dispatch, its polling), which would
  drown the work itself, so the makespan is the tasks' measured durations list-scheduled on
  `concurrency` slots in id order (`list_schedule`): the array on an idle cluster.

Values cross back as the harness encoded them and are decoded strictly here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import shlex
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runners import package
from runners.nodes import hardware, slurm
from runners.package import Assignment
from runners.protocol import Verdict
from runners.runs import configure
from runners.runs.codec import decode, encode
from runners.runs.failures import ProtocolViolation, SubmissionFailure, SubmissionRaised
from runners.runs.runconfig import RunConfig
from runners.runs.session import Session
from runners.runs.stage import Stage
from runners.sandbox import create_executor
from runners.settings import RunnerSettings, get_settings

RESULT = "result-{}.json"


class ArrayUnavailable(RuntimeError):
    """The launcher could not run the array (SLURM failed): the platform's fault, not the code's."""


@dataclass
class ArrayResult:
    values: list[Any]  # one per task, in task-id order
    makespan_s: float
    cpu_s: float | None = None  # every task's call, all its sandbox's processes (None: not measured)


def run(cfg: RunConfig, function: str, inputs: dict[str, Any], *, n_tasks: int, concurrency: int,
        settings: RunnerSettings, assignment_root: Path) -> ArrayResult:
    """Run the array with the launcher the settings name."""
    if settings.array_launcher == "slurm":
        return run_slurm(cfg, function, inputs, n_tasks=n_tasks, concurrency=concurrency,
                         settings=settings, assignment_root=assignment_root)
    return run_local(cfg, function, inputs, n_tasks=n_tasks, concurrency=concurrency)


ArrayRun = Callable[[dict[str, Any]], ArrayResult]
"""Inputs -> one whole array's values, makespan and CPU time (timing's view of an array)."""


def array_runner(assignment: Assignment, cfg: RunConfig, n_tasks: int, concurrency: int,
                 settings: RunnerSettings) -> ArrayRun:
    """Inputs -> the array's values, makespan and CPU time for an [array] package's code under
    `cfg`."""
    function = str(assignment.manifest.entry.function)

    def one_array(inputs: dict[str, Any]) -> ArrayResult:
        return run(cfg, function, inputs, n_tasks=n_tasks, concurrency=concurrency,
                   settings=settings, assignment_root=assignment.root)

    return one_array


def _one_core(cfg: RunConfig, core: int) -> RunConfig:
    return dataclasses.replace(cfg, limits=dataclasses.replace(cfg.limits, cpus=(core,)))


def run_local(cfg: RunConfig, function: str, inputs: dict[str, Any], *, n_tasks: int,
              concurrency: int) -> ArrayResult:
    """Tasks as sandboxes on this runner: slot i runs on the allotment's i-th core. When a task
    fails the others are stopped and that failure is raised."""
    cores = cfg.limits.cpus
    slots = max(1, min(concurrency, n_tasks, len(cores)))
    values: list[Any] = [None] * n_tasks
    pending = iter(range(n_tasks))
    lock = threading.Lock()
    failure: list[BaseException] = []
    live: set[Session] = set()
    cpu: list[float | None] = []
    stopped = threading.Event()

    def stop_all() -> None:
        stopped.set()
        with lock:
            running = list(live)
        for session in running:
            session.kill()

    def slot(core: int) -> None:
        one = _one_core(cfg, core)
        while True:
            with lock:
                task = None if stopped.is_set() else next(pending, None)
                if task is None:
                    return
                session = Session(one)
                live.add(session)
            try:
                session.start()
                values[task], _ = session.call(function, task_id=task, n_tasks=n_tasks,
                                               **inputs)
                with lock:
                    cpu.append(session.last_cpu_s)  # the task's work, not its start-up
            except BaseException as exc:  # re-raised in the caller's thread
                with lock:
                    first = not stopped.is_set()  # not one of the tasks stopped because of it
                    if first:
                        failure.append(exc)
                if first:
                    stop_all()
                return
            finally:
                session.close()
                with lock:
                    live.discard(session)

    threads = [threading.Thread(target=slot, args=(cores[i],), daemon=True) for i in range(slots)]
    t0 = time.perf_counter()
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:  # also when interrupted (cancelled, out of time): no sandbox outlives the call
        if any(t.is_alive() for t in threads):
            stop_all()
    makespan = time.perf_counter() - t0
    if failure:
        raise failure[0]
    measured = None if None in cpu or len(cpu) != n_tasks else sum(c for c in cpu if c is not None)
    return ArrayResult(values, makespan, measured)


# --- SLURM ----------------------------------------------------------------------------------


def run_slurm(cfg: RunConfig, function: str, inputs: dict[str, Any], *, n_tasks: int,
              concurrency: int, settings: RunnerSettings, assignment_root: Path) -> ArrayResult:
    """One `sbatch --array …`; the values and durations the tasks' engines recorded."""
    work = (settings.scratch_dir or Path("/tmp")) / "paragrade-array" / uuid.uuid4().hex
    client_env = {"PATH": settings.slurm_path}
    if settings.slurm_conf is not None:
        client_env["SLURM_CONF"] = str(settings.slurm_conf)
    job = ""
    try:
        work.mkdir(parents=True, mode=0o700)
        (work / "job.json").write_text(json.dumps({
            "function": function, "n_tasks": n_tasks, "inputs": encode(inputs),
            "code_dir": str(cfg.code_dir), "assignment": str(assignment_root)}))
        waves = math.ceil(n_tasks / max(1, concurrency))
        minutes = math.ceil(cfg.limits.wall_s / 60) + 1
        python = settings.slurm_python or sys.executable
        argv = ["sbatch", "--parsable", f"--array=0-{n_tasks - 1}%{max(1, concurrency)}",
                f"--job-name=paragrade-array-{work.name[:8]}", "--nodes=1", "--ntasks=1",
                "--cpus-per-task=1", f"--mem={cfg.limits.memory_mb + 512}M",
                f"--time={minutes}", f"--output={work}/slurm-%a.out", slurm.export(settings)]
        if settings.slurm_partition:
            argv.append(f"--partition={settings.slurm_partition}")
        argv += [*settings.slurm_args, "--wrap",
                 shlex.join([python, "-m", "runners.runs.array", str(work)])]
        proc = subprocess.run(argv, capture_output=True, text=True, env=client_env, timeout=60)
        job = proc.stdout.strip().split(";")[0]
        if proc.returncode != 0 or not job.isdigit():
            raise ArrayUnavailable(f"sbatch failed: {proc.stderr.strip()[-500:]}")
        _wait(work, job, n_tasks, client_env, deadline=time.monotonic() + waves * (
            cfg.limits.wall_s + 60) + 120)
        result = _gather(work, n_tasks, concurrency)
        job = ""  # done: nothing to cancel
        return result
    except (OSError, subprocess.SubprocessError, ValueError, KeyError, slurm.SlurmError) as exc:
        raise ArrayUnavailable(f"the array job failed: {exc}") from exc
    finally:
        if job:  # failed or interrupted: no task outlives the call
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                subprocess.run(["scancel", job], env=client_env, capture_output=True, timeout=30)
        shutil.rmtree(work, ignore_errors=True)


def _wait(work: Path, job: str, n_tasks: int, env: dict[str, str], deadline: float) -> None:
    """Until every task has left its record or the job has left the queue (sbatch --wait polls
    every few seconds; the records are on a shared filesystem, cheap to watch)."""
    results = [work / RESULT.format(t) for t in range(n_tasks)]
    checked = time.monotonic()
    while not all(r.is_file() for r in results):
        now = time.monotonic()
        if now > deadline:
            raise ArrayUnavailable("the array job did not finish in time")
        if now - checked > 2:  # is the job still queued or running?
            checked = now
            q = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], env=env,
                               capture_output=True, text=True, timeout=30)
            if not q.stdout.strip():
                return  # finished (or gone): whatever is missing is reported by _gather
        time.sleep(0.1)


def list_schedule(durations: list[float], slots: int) -> float:
    """The makespan of tasks run in id order on `slots` slots, each starting the moment a slot
    frees up: what the array takes on an idle cluster, without the scheduler's dispatch gaps."""
    free = [0.0] * max(1, slots)
    for d in durations:
        i = min(range(len(free)), key=free.__getitem__)
        free[i] += d
    return max(free)


def _gather(work: Path, n_tasks: int, concurrency: int) -> ArrayResult:
    values: list[Any] = []
    durations = []
    for task in range(n_tasks):
        path = work / RESULT.format(task)
        if not path.is_file():
            log = work / f"slurm-{task}.out"
            tail = log.read_text(errors="replace")[-800:] if log.is_file() else ""
            raise ArrayUnavailable(f"array task {task} left no result: {tail}")
        record = json.loads(path.read_text())
        if not record["ok"]:
            if record["kind"] == "platform":
                raise ArrayUnavailable(f"array task {task}: {record['message']}")
            if record["kind"] == "raised":
                raise SubmissionRaised(record["type"], record["message"], record["traceback"])
            raise SubmissionFailure(Verdict(record["verdict"]), record["message"],
                                    record["output"])
        try:
            values.append(decode(record["value"]))
        except (ValueError, TypeError, KeyError) as exc:
            raise ProtocolViolation(f"an undecodable value ({exc})") from exc
        durations.append(float(record["end"]) - float(record["start"]))
    return ArrayResult(values, list_schedule(durations, concurrency))


def task_main(work: Path, task: int) -> None:
    """One array task on its node (trusted): a sandbox on this task's cores, one call, a record.

    Every outcome leaves a record: the value, the submission's failure, or a platform error."""
    start = time.time()
    record: dict[str, Any]
    stage: Stage | None = None
    try:
        job = json.loads((work / "job.json").read_text())
        settings = get_settings()
        assignment = package.load(Path(job["assignment"]))
        stage = Stage(scratch=settings.scratch_dir)
        if assignment.data_dir is not None:
            stage.add_data(assignment.data_dir)
        cfg = configure.make_config(assignment, executor=create_executor(settings, None),
                                    stage=stage, code_dir=Path(job["code_dir"]),
                                    cpus=hardware.host_cpus(), workers=1, gpu_mode="none",
                                    settings=settings)
        session = Session(cfg)
        try:
            session.start()
            value, _ = session.call(job["function"], task_id=task, n_tasks=job["n_tasks"],
                                    **decode(job["inputs"]))
        finally:
            session.close()
        try:
            record = {"ok": True, "value": encode(value)}
        except (TypeError, ValueError, RecursionError) as exc:  # e.g. nested beyond the limit
            raise ProtocolViolation(f"a value that cannot be passed on ({exc})") from exc
    except SubmissionRaised as exc:
        record = {"ok": False, "kind": "raised", "type": exc.type_name, "message": exc.message,
                  "traceback": exc.traceback}
    except SubmissionFailure as exc:
        record = {"ok": False, "kind": "failure", "verdict": exc.verdict.value,
                  "message": exc.message, "output": exc.output}
    except Exception as exc:  # the platform's (a package or sandbox problem on this node)
        record = {"ok": False, "kind": "platform", "message": f"{type(exc).__name__}: {exc}"}
    finally:
        if stage is not None:
            stage.cleanup()
    record.update(start=start, end=time.time())
    tmp = work / f".{RESULT.format(task)}"
    tmp.write_text(json.dumps(record))
    tmp.rename(work / RESULT.format(task))


if __name__ == "__main__":  # an array task, as SLURM starts it: python -m runners.runs.array WORK
    task_id = get_settings().slurm_array_task_id
    if len(sys.argv) != 2 or task_id is None:
        sys.exit("usage: python -m runners.runs.array WORK, inside an sbatch --array job")
    task_main(Path(sys.argv[1]), task_id)
