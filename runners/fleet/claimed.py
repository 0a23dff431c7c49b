"""What a runner says to the server about a job it claimed: its lease while it grades, its
outcome, or, when the runner is leaving, the job given back untouched (runners/fleet/leaving.py).

Every request carries the job's own secret (X-Job-Token) beside the runner's credential and
process key (runners/fleet/runner.py `Runner.client`); the server answers the process that claimed.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

import httpx

from runners.fleet import leaving
from runners.protocol import JobHandBack, JobOffer, JobOutcome

log = logging.getLogger("paragrade.runner")

REFUSED = (401, 403)  # a credential unknown or revoked; a name or queue it does not give


class JobCancelled(BaseException):
    """The server voided this job (cancelled or superseded): stop grading it.

    A BaseException, so that no `except Exception` on the way up swallows it.
    """


@contextmanager
def lease(client: httpx.Client, offer: JobOffer, every_s: float,
          leave: Callable[[], str | None] = lambda: None) -> Iterator[None]:
    """Renew the job's lease while the block runs; raise JobCancelled in it if the job is voided,
    HandBack if `leave` says why the runner must give it back (a drain it cannot outlast).

    Runs in the task's main thread (Celery's pool child), so SIGUSR2 interrupts whatever the
    grading waits on; its cleanups still run on the way out.
    """
    stop = threading.Event()
    main = threading.get_ident()
    why: list[BaseException] = []

    def interrupted(_signum: int, _frame: FrameType | None) -> None:
        raise why[0] if why else JobCancelled(f"job {offer.job_id} was cancelled")

    def beat() -> None:
        while not stop.wait(every_s):
            if (reason := leave()) is not None and not stop.is_set():
                log.warning("job %s goes back to the queue: %s", offer.job_id, reason)
                why.append(leaving.HandBack(reason))
                signal.pthread_kill(main, signal.SIGUSR2)
                return
            try:
                r = client.post(f"/api/runner/jobs/{offer.job_id}/heartbeat",
                                headers={"X-Job-Token": offer.token})
            except httpx.HTTPError as exc:
                log.warning("heartbeat for job %s failed: %s", offer.job_id, exc)
                continue
            if r.status_code in REFUSED and not stop.is_set():  # voided, or our credential
                log.warning("job %s was voided on the server (%s); stopping it", offer.job_id,
                            refusal(r))
                signal.pthread_kill(main, signal.SIGUSR2)
                return

    previous = signal.signal(signal.SIGUSR2, interrupted)
    thread = threading.Thread(target=beat, name=f"lease-{offer.job_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        signal.signal(signal.SIGUSR2, previous)


def post_outcome(client: httpx.Client, offer: JobOffer, outcome: JobOutcome) -> bool:
    """Post the outcome, retrying while the server is unreachable; False if it was refused."""
    for attempt in range(8):
        try:
            r = client.post(f"/api/runner/jobs/{offer.job_id}/result",
                            content=outcome.model_dump_json(),
                            headers={"X-Job-Token": offer.token,
                                     "Content-Type": "application/json"})
        except httpx.TransportError as exc:
            log.warning("posting job %s's result failed (%s); retrying", offer.job_id, exc)
            time.sleep(min(30, 2 ** attempt))
            continue
        if r.status_code in REFUSED:  # voided meanwhile, or our credential was revoked
            log.warning("job %s's result was refused: %s", offer.job_id, refusal(r))
            return False
        r.raise_for_status()
        return True
    return False


def hand_back(client: httpx.Client, offer: JobOffer, reason: str) -> bool:
    """Give the job back to the server's queue untouched; False if the server would not take it
    (the job was voided meanwhile; the reaper takes back a job left claimed in any case)."""
    for attempt in range(3):  # SLURM kills a job 30 s (KillWait) after its SIGTERM
        try:
            r = client.post(f"/api/runner/jobs/{offer.job_id}/release",
                            content=JobHandBack(reason=reason[:500]).model_dump_json(),
                            headers={"X-Job-Token": offer.token,
                                     "Content-Type": "application/json"}, timeout=10)
        except httpx.TransportError as exc:
            log.warning("handing back job %s failed (%s); retrying", offer.job_id, exc)
            time.sleep(1 + attempt)
            continue
        if r.status_code == 204:
            log.info("job %s handed back: %s", offer.job_id, reason)
            return True
        log.warning("job %s could not be handed back: %s", offer.job_id, refusal(r))
        return False
    return False


def refusal(r: httpx.Response) -> str:
    """The server's own words for a refusal."""
    try:
        return str(r.json().get("detail", r.text))[:500]
    except ValueError:
        return r.text[:500]
