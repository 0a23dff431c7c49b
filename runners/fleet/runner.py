"""A runner: a Celery worker that takes job ids from its queues and grades each job.

The broker message carries only a job id. The runner claims the job over HTTP with its
credential (its own, issued by `paragrade admin runner add NAME`, whose name it serves under; or
a development start's fleet token): a job already done, claimed, superseded or cancelled is
refused, so a redelivered message grades nothing twice. It then uses the job's own secret to
fetch the bundle and the submission, to renew the job's lease while it grades, and to post the
outcome. It holds no database credentials. Bundles are cached by content hash. A credential the
server refuses (revoked, another runner's name, a queue it does not give) stops the runner: at
its start with the server's reason, later at the next heartbeat, the job it grades included.

Each runner process makes a random key at its start (kept in memory only: never in its
environment, its command line or a file, so no sandbox or other user sees it) and sends it as
X-Runner-Key with every request: the server binds a claimed job to it, and answers requests about
that job from this process alone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import signal
import socket
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import threadpoolctl
from celery.exceptions import Reject, SecurityWarning, SoftTimeLimitExceeded
from celery.signals import worker_process_init, worker_ready

from runners import package
from runners.fleet import claimed, leaving
from runners.fleet.broker import consumer_app
from runners.fleet.bundles import BundleCache
from runners.grading import grader, testrun, validate
from runners.measure import calibration, capacity
from runners.nodes import gang, hardware, overlay, slurm
from runners.protocol import (
    PROTOCOL_VERSION,
    TASK_NAME,
    GradeReport,
    JobOffer,
    JobOutcome,
    Queue,
    RunnerHello,
    Verdict,
    archives,
)
from runners.sandbox import Executor, cgroups
from runners.settings import RunnerSettings, get_settings

log = logging.getLogger("paragrade.runner")


class NoGang(RuntimeError):
    """The runner was asked to serve multi-node jobs but holds no gang of nodes."""


class NoGpu(RuntimeError):
    """The runner was asked to serve the gpu queue on a node without a GPU."""


class Refused(RuntimeError):
    """The server refused this runner's credential, its name or its queues (the reason is the
    server's)."""


@dataclass
class Runner:
    """What one runner process knows: who it is, where its server is, its cache."""

    name: str
    queues: list[Queue]
    server: str
    token: str = field(repr=False)
    settings: RunnerSettings
    tenure: leaving.Tenure = field(default_factory=leaving.Tenure)
    key: str = field(default_factory=lambda: secrets.token_urlsafe(32), repr=False)
    _jobs_client: tuple[int, httpx.Client] | None = field(default=None, init=False, repr=False)

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.server, timeout=60,
                            headers={"Authorization": f"Bearer {self.token}",
                                     "X-Runner-Key": self.key})

    def jobs_client(self) -> httpx.Client:
        """This process's client for its jobs, made once and kept (with its connection).

        Building a client costs ≈ 30 ms (its TLS context), which was most of a runner's idle
        gap between two jobs. Made per process id: Celery's pool child is a fork of the process
        that set up the runner, and a client must not share its parent's connections.
        """
        pid = os.getpid()
        if self._jobs_client is None or self._jobs_client[0] != pid:
            self._jobs_client = (pid, self.client())
        return self._jobs_client[1]

    def cache(self) -> BundleCache:
        return BundleCache((self.settings.scratch_dir or Path(tempfile.gettempdir()))
                           / "paragrade-bundles")


_runner: Runner | None = None  # set in the worker's main process, inherited by its pool child


def _package(offer: JobOffer, client: httpx.Client, cache: BundleCache) -> Path:
    what = offer.job or offer.validate_job or offer.similarity_job
    assert what is not None
    folder = cache.folder(what.assignment, what.bundle_sha256)
    if folder is None:
        r = client.get(f"/api/runner/jobs/{offer.job_id}/bundle",
                       headers={"X-Job-Token": offer.token})
        r.raise_for_status()
        folder = cache.folder(what.assignment, what.bundle_sha256, r.content)
    assert folder is not None
    return folder


def handle(offer: JobOffer, client: httpx.Client, cache: BundleCache,
           settings: RunnerSettings) -> JobOutcome:
    """Grade or validate what the offer names; platform failures become a platform_error."""
    on_slurm = settings.backend == "slurm"
    tag = str(offer.job_id)
    try:
        folder = _package(offer, client, cache)
        if offer.validate_job is not None:
            if on_slurm:
                return JobOutcome(checks=slurm.validate(package.load(folder), settings=settings,
                                                        time_limit_s=3600, tag=tag))
            checks = validate.validate(folder, settings=settings)
            return JobOutcome(checks=[c.message() for c in checks])
        r = client.get(f"/api/runner/jobs/{offer.job_id}/submission",
                       headers={"X-Job-Token": offer.token})
        r.raise_for_status()
        files = archives.members(r.content, max_ratio=None)
        if offer.similarity_job is not None:  # text only, nothing runs: no sandbox needed
            # Imported here: copydetect loads matplotlib's pyplot, 0.4 s of every runner's start.
            from runners.grading import similarity

            return JobOutcome(similarity=similarity.compare(
                similarity.texts_of(files), boilerplate=similarity.boilerplate_of(folder),
                threshold=offer.similarity_job.threshold))
        assert offer.job is not None
        a = package.load(folder)
        report: GradeReport = (
            slurm.grade(a, files, settings=settings, time_limit_s=offer.job.time_limit_s, tag=tag,
                        reference_speedup=offer.job.reference_speedup,
                        timing_only=offer.job.timing_only, timing_share=offer.job.timing_share,
                        practice=offer.job.practice, profile=offer.job.profile)
            if on_slurm else grader.grade(
                a, files, settings=settings, reference_speedup=offer.job.reference_speedup,
                reference_test_s=offer.job.reference_test_seconds,
                timing_only=offer.job.timing_only, timing_share=offer.job.timing_share,
                practice=offer.job.practice, profile=offer.job.profile))
        return outcome_of(report)
    except SoftTimeLimitExceeded:
        return JobOutcome(platform_error="the job ran past its time limit on the runner")
    except calibration.NodeBusy as exc:  # not the package's fault: the server tries it again
        log.warning("job %s: the node is busy: %s", offer.job_id, exc)
        return JobOutcome(platform_error=f"the node was busy: {exc}"[:2000])
    except (httpx.HTTPError, OSError, ValueError, package.PackageError,
            slurm.SlurmError, overlay.OverlayError) as exc:
        log.exception("job %s failed on the platform side", offer.job_id)
        return JobOutcome(platform_error=f"{type(exc).__name__}: {exc}"[:2000])


def outcome_of(report: GradeReport) -> JobOutcome:
    """A grading's outcome as the server takes it: a report, or, where the platform failed it
    (a lost node, a runner without the nodes or GPU it needs), a platform failure, which the
    server grades again and never charges to the student."""
    if report.verdict is Verdict.PLATFORM_ERROR:
        return JobOutcome(platform_error=report.summary)
    return JobOutcome(report=report)


class _HandedBack(logging.Filter):
    """A message handed back to the broker while the runner leaves is no error: Celery logs the
    task's Reject with a traceback; the line before it says what happened."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], Reject):
            record.exc_info, record.exc_text = None, None
        return True


logging.getLogger("celery.app.trace").addFilter(_HandedBack())


def run_job(job_id: int) -> str:
    """The Celery task: claim a job of the message's queue (the most urgent), run it, post the
    outcome. Returns what happened."""
    runner = _runner
    if runner is None:
        raise RuntimeError("this process is not a paragrade runner")
    if runner.tenure.leaving():  # its message goes back to the broker, the job unclaimed
        raise Reject("the runner is leaving", requeue=True)
    with runner.tenure.job():
        return _run_job(runner, job_id)


def _run_job(runner: Runner, job_id: int) -> str:
    client = runner.jobs_client()
    r = client.post(f"/api/runner/jobs/{job_id}/claim", params={"runner": runner.name})
    if r.status_code in (404, 409):  # nothing queued on its queue any more
        log.info("job %s not claimable (%s): dropped", job_id, r.json().get("detail"))
        return "dropped"
    if r.status_code in claimed.REFUSED:  # the job stays queued for a runner the server accepts
        log.error("job %s: the server refused our claim: %s", job_id, claimed.refusal(r))
        return "refused"
    r.raise_for_status()
    offer = JobOffer.model_validate(r.json())
    what = offer.job or offer.validate_job or offer.similarity_job
    assert what is not None
    kind = ("validate" if offer.validate_job else "compare" if offer.similarity_job
            else "practice" if offer.job and offer.job.practice
            else "time (final run)" if offer.job and offer.job.timing_only else "grade")
    # The message is a turn on its queue: the server hands out the most urgent job queued there.
    job_id = offer.job_id
    log.info("job %s: %s %s", job_id, kind, what.assignment)
    tenure, claimed_at = runner.tenure, time.time()
    limit = offer.job.time_limit_s if offer.job is not None else leaving.NON_GRADE_LIMIT_S
    tenure.grading(True)  # from here until the outcome, a SIGTERM hands the job back
    try:
        with claimed.lease(client, offer, runner.settings.heartbeat_s,
                   leave=lambda: tenure.overdue(claimed_at, limit)):
            if (reason := tenure.overdue(claimed_at, limit)) is not None:
                raise leaving.HandBack(reason)
            outcome = handle(offer, client, runner.cache(), runner.settings)
    except claimed.JobCancelled:
        log.info("job %s cancelled while it ran", job_id)
        return "cancelled"
    except leaving.HandBack as exc:
        tenure.grading(False)
        return "handed back" if claimed.hand_back(client, offer, str(exc)) else "refused"
    finally:
        tenure.grading(False)
    return "recorded" if claimed.post_outcome(client, offer, outcome) else "refused"


class BadCpus(ValueError):
    """A CPU list that cannot be used here."""


def parse_cpus(spec: str) -> set[int]:
    """'0-3,6' → {0, 1, 2, 3, 6}; BadCpus naming what is wrong."""
    out: set[int] = set()
    for part in spec.split(","):
        lo, _, hi = part.strip().partition("-")
        if not lo.isdecimal() or (hi and not hi.isdecimal()) or (hi and int(hi) < int(lo)):
            raise BadCpus(f"bad CPU list {spec!r}: use e.g. 0-3,6")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def take_cpus(spec: str) -> None:
    """Confine this runner (and every sandbox it starts) to a slice of the node's cores."""
    wanted, have = parse_cpus(spec), os.sched_getaffinity(0)
    if not wanted <= have:
        raise BadCpus(f"CPUs {sorted(wanted - have)} are not available here "
                         f"(this process may use {sorted(have)})")
    confine(wanted)


def confine(cpus: set[int]) -> None:
    """Move this whole process onto `cpus`: every thread, not only the caller, and the thread
    pools of native libraries already loaded shrink to them.

    numpy's OpenBLAS sized its pool for the whole node when it was imported, and its threads kept
    the whole node's cores. Left so, the trusted checks in Celery's pool child (a fork, whose BLAS
    threads are remade on the slice) ran two BLAS threads on one core that wait for each other by
    spinning: slurm-array's check of one input took 72 s instead of 2.9 s (tests/test_worker.py).
    """
    for thread in os.listdir("/proc/self/task"):
        with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(thread), cpus)
    threadpoolctl.threadpool_limits(len(cpus))


def capabilities(settings: RunnerSettings, name: str, queues: list[Queue],
                 executor: Executor | None) -> RunnerHello:
    """What this node offers, as the fleet lists it (`executor`: None on SLURM)."""
    from runners.sandbox import BackendUnavailable

    model = hardware.gpu_present()
    mpiexec = settings.runtime_dir / "bin" / "mpiexec"
    if executor is None:  # SLURM: the engine's backend runs on the compute nodes
        why = slurm.available()
        if why is not None:
            raise BackendUnavailable(why)
        return RunnerHello(name=name, queues=queues, backend="slurm",
                           cores=slurm.cores_per_node(settings), memory_mb=0,
                           mpi="mpich" if mpiexec.exists() else None,
                           image=settings.slurm_partition)
    nodes = len(gang.held_nodes(settings, hardware.host_cpus())) if "mpinodes" in queues else 0
    if "mpinodes" in queues and nodes < 2:
        raise NoGang("the mpinodes queue needs a runner that holds two nodes or more (set "
                     "PARAGRADE_STANDIN_NODES for stand-in nodes on this host)")
    return RunnerHello(name=name, queues=queues, backend=executor.name, nodes=max(1, nodes),
                       pressure=calibration.pressure(),
                       cores=len(hardware.host_cpus()),
                       memory_mb=os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") >> 20,
                       gpus=hardware.gpu_count() if model else 0, gpu_model=model,
                       mpi="mpich" if mpiexec.exists() else None, image=executor.image())


START_CALIBRATION_S = 1.5
"""A runner's calibration as it starts: shorter than the operator's, paid by every start."""


def calibrate(settings: RunnerSettings) -> None:
    """Calibrate this node's cores where it is idle now (runners/measure/calibration.py); on a
    busy node the stored calibration stays, and the log says why. A calibration of every core
    made less than `calibration_kept_s` ago is kept as it is: a pilot started at every deadline,
    or a runner restarted, would spin both cores again for the same figures."""
    cpus = hardware.host_cpus()
    kept = calibration.load(settings.calibration_file)
    age = kept.age_s() if kept is not None else None
    if (kept is not None and age is not None and age < settings.calibration_kept_s
            and set(cpus) <= set(kept.rates)):
        log.info("kept the calibration made %.0f s ago: %s", age, calibration.summary(kept))
        return
    try:
        cal = capacity.calibrate(cpus, seconds=START_CALIBRATION_S)
    except calibration.NodeBusy as exc:
        log.warning("the node is busy as the runner starts (%s): %s", exc,
                    f"gradings compare with {calibration.summary(kept)}" if kept is not None
                    else "no calibration yet, so a node busy from the start may read as idle "
                    "until it is made (`paragrade runner calibrate`)")
        return
    try:
        cal = calibration.store(cal, settings.calibration_file)
    except OSError as exc:
        log.warning("the calibration could not be stored in %s: %s", settings.calibration_file,
                    exc)
        return
    log.info("%s", calibration.summary(cal))


def greet(client: httpx.Client, hello: RunnerHello) -> None:
    """Say hello once; Refused (with the server's reason) where it refuses this runner."""
    r = client.post("/api/runner/hello", content=hello.model_dump_json(),
                    headers={"Content-Type": "application/json"})
    if r.status_code in (*claimed.REFUSED, 409):  # 409: another protocol version
        raise Refused(f"the server refused runner {hello.name}: {claimed.refusal(r)}")
    r.raise_for_status()


def announce(runner: Runner, hello: RunnerHello, stop: threading.Event) -> None:
    """Say hello again every heartbeat (the fleet shows who is live); a credential refused
    meanwhile (revoked) stops the runner."""
    with runner.client() as client:
        while not stop.wait(runner.settings.heartbeat_s):
            try:
                greet(client, hello.model_copy(update={"pressure": calibration.pressure()}))
            except Refused as exc:
                log.error("%s: stopping", exc)
                os.kill(os.getpid(), signal.SIGTERM)  # Celery's warm shutdown
                return
            except httpx.HTTPError as exc:
                log.warning("the server did not take our heartbeat: %s", exc)


def _prepare_tests(**_: object) -> None:
    """Celery's pool child, as it starts: the test processes' fork server, in the background."""
    def start() -> None:
        try:
            testrun.prepare()
        except OSError as exc:
            log.warning("the test processes' fork server did not start yet: %s", exc)

    threading.Thread(target=start, name="testfork", daemon=True).start()


def serve(*, server: str, token: str, broker_url: str, queues: list[Queue],
          name: str | None = None, settings: RunnerSettings | None = None,
          idle_exit_s: float | None = None, drain_s: float | None = None) -> None:
    """Run a Celery worker on `queues` until stopped (one job at a time), or until idle for
    `idle_exit_s`; SIGUSR1 drains it (its allocation ends in `drain_s`, runners/fleet/leaving.py)."""
    global _runner
    settings = settings or get_settings()
    if "gpu" in queues and settings.gpu_mode != "simulated" and settings.backend != "slurm" \
            and not hardware.gpu_present():
        raise NoGpu("this node has no GPU, so it cannot serve the gpu queue (set "
                    "PARAGRADE_GPU_MODE=simulated to serve it with the CUDA simulator, for tests)")
    if "gpusim" in queues and settings.gpu_mode == "none":
        raise NoGpu("the gpusim queue's tasks run their kernels under the CUDA simulator, which "
                    "PARAGRADE_GPU_MODE=none turns off (use auto or simulated)")
    name = name or settings.runner_name or f"{socket.gethostname()}-{os.getpid()}"
    if settings.cpus:
        take_cpus(settings.cpus)
    tenure = leaving.Tenure(idle_exit_s, drain_s)
    _runner = Runner(name=name, queues=queues, server=server, token=token, settings=settings,
                     tenure=tenure)
    if swept := cgroups.sweep():
        log.info("removed %d empty run cgroups an earlier runner left", swept)
    from runners.sandbox import create_executor

    # Fails here, at start, if the backend cannot run (the SLURM one is checked in capabilities).
    executor = None if settings.backend == "slurm" else create_executor(settings)
    hello = capabilities(settings, name, queues, executor)
    # Refused here, at start, with the server's reason: a revoked credential, another runner's
    # name, a queue the credential does not give. An unreachable server is waited for later.
    with _runner.client() as client:
        until = time.monotonic() + settings.wait_for_server_s
        while True:
            try:
                greet(client, hello)
                break
            except httpx.HTTPError as exc:
                if time.monotonic() >= until:
                    log.warning("the server did not take our hello yet (%s); serving anyway",
                                exc)
                    break
                time.sleep(0.5)  # a server starting beside us: calibrate once it is up
    if executor is not None and settings.calibrate_at_start:
        calibrate(settings)
    if executor is not None and (left := executor.sweep()):
        log.info("removed %d stopped sandboxes an earlier runner left", left)
    if os.geteuid() == 0 and (left := overlay.sweep()):
        log.info("removed %d run networks an earlier runner left", left)
    app = consumer_app(broker_url, settings.broker_key_prefix)
    # The server unreachable at the claim: try again later (the job stays queued meanwhile).
    app.task(name=TASK_NAME, ignore_result=True, autoretry_for=(httpx.TransportError,),
             retry_backoff=5, retry_backoff_max=120, max_retries=30)(run_job)
    if executor is not None:  # jobs are graded in the pool child, not on SLURM's nodes
        worker_process_init.connect(_prepare_tests, weak=False)
    worker_ready.connect(lambda **_: tenure.install_parent(), weak=False)
    stop = threading.Event()
    threading.Thread(target=announce, args=(_runner, hello, stop), name="announce",
                     daemon=True).start()
    threading.Thread(target=tenure.watch_idle, args=(stop,), name="idle", daemon=True).start()
    log.info("runner %s (protocol %d) serving %s", name, PROTOCOL_VERSION, ",".join(queues))
    # Root is how a runner drops each sandbox to `nobody` and makes cgroups; Celery warns anyway.
    warnings.filterwarnings("ignore", category=SecurityWarning)
    try:
        app.worker_main(["--quiet", "worker", "--queues", ",".join(queues), "--concurrency", "1",
                         "--pool", "prefork", "--hostname", f"{name}@%h", "--loglevel", "INFO",
                         "--without-gossip", "--without-mingle", "--without-heartbeat"])
    finally:
        stop.set()
    leaving.end_now_if_alone()
