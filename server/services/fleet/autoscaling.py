"""Runners that follow the queue: how many each queue needs, and the pilots started for it.

An operator states, per queue, a minimum, a maximum and how many queued or running jobs one
runner is counted for (`jobs_per_runner`); a provider (`server/pilots.py`: SLURM batch jobs)
starts runners ("pilots") where the site runs work. Every pass (`paragrade admin scale`):

    demand  = jobs queued + jobs running, from the database (a broker's list length misses the
              messages runners hold unacknowledged, one per busy runner with acks_late)
    static  = live runners serving the queue that no scaler started (an operator's fixed fleet)
    wanted  = ceil(demand / jobs_per_runner) - static
    now     = min(max, max(min, wanted))
    desired = the largest `now` of the last `scale_in_delay_s` seconds

So the fleet grows at once and shrinks only after the queue has stayed small for the delay (a
burst that pauses for a minute does not give its runners back and ask for new ones). Pilots
waiting for a node and pilots running count alike against `desired`: fewer, and the scaler
submits the difference; more, and it cancels pilots that still wait (newest first). A running
pilot is never stopped by the scaler: it leaves by itself after `idle_exit_s` without a job, or
drains before its allocation ends (runners/fleet/leaving.py), so a grading is never cut.

A pilot holds a credential of its own, for its queue only, issued when it is submitted and
ending with its batch job: while it waits, at submission plus `pending_limit_s` plus its time
limit; once it runs, at its start plus its time limit. A pilot gone from the provider's list
(ended, cancelled, killed with its node) has its credential ended, and a job it held goes back
to the queue at once rather than after its lease runs out.
"""

from __future__ import annotations

import math
import secrets
import statistics
import sys
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator
from sqlalchemy import select
from sqlalchemy.orm import Session

from runners.protocol import Queue
from server.models import QueueScale, Runner, RunnerCredential, aware, now
from server.services.fleet import runner_credentials
from server.services.fleet import state as fleet_service
from server.services.records import jobs

EXPIRY_GRACE_S = 120
"""Added to a running pilot's time limit for its credential's end: SLURM kills a job at its
limit plus KillWait (30 s by default), and a hand-back in that window must still be heard."""

STARTS_KEPT = 10
"""Pilot start times (submission to its runner's hello) whose median a waiting student is told."""


class QueuePolicy(BaseModel):
    """How one queue's fleet may grow and shrink, and what a pilot for it asks of the site."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min: int = Field(default=0, ge=0, description="Runners kept even with nothing queued")
    max: int = Field(ge=0, description="Runners at most, however long the queue")
    jobs_per_runner: int = Field(default=1, ge=1, description=(
        "Queued or running jobs one runner is counted for: 1 starts a runner per job (the "
        "quickest drain); larger, fewer runners that each grade several jobs in turn"))
    scale_in_delay_s: int = Field(default=300, ge=0, description=(
        "How long the fleet keeps the size a peak asked for"))
    idle_exit_s: int = Field(default=120, ge=5, description=(
        "A pilot leaves after this long without a job"))
    time_limit_s: int = Field(default=3600, ge=60, description="A pilot's whole allocation")
    drain_s: int = Field(default=600, ge=30, description=(
        "How long before its time limit a pilot stops taking jobs (SLURM's --signal): longer "
        "than the queue's longest job, or that job goes back to the queue instead"))
    pending_limit_s: int = Field(default=86400, ge=60, description=(
        "How long a submitted pilot may wait for a node before it is cancelled"))
    partition: str | None = None
    sbatch: list[str] = Field(default_factory=list, description=(
        "More sbatch options: --gres=gpu:1, --cpus-per-task=8, --account=…"))

    @model_validator(mode="after")
    def _consistent(self) -> QueuePolicy:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is more than max ({self.max})")
        if self.drain_s >= self.time_limit_s:
            raise ValueError(f"drain_s ({self.drain_s}) must be less than time_limit_s "
                             f"({self.time_limit_s})")
        return self


class FleetPolicy(BaseModel):
    """The scaler's whole configuration (a TOML file, `paragrade admin scale FILE`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(default="paragrade", pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,39}$",
                      description="Names this fleet's pilots (and their SLURM jobs)")
    provider: Literal["slurm"] = "slurm"
    server: str | None = Field(default=None, description=(
        "The server's URL as pilots reach it (default: the server's public URL)"))
    broker: str | None = Field(default=None, description=(
        "The broker's URL as pilots reach it (default: the server's)"))
    state_dir: Path = Field(description=(
        "A folder on a filesystem the compute nodes share: each pilot's script, its "
        "once-read secrets and its log"))
    python: str = Field(default=sys.executable, description=(
        "The Python that runs `paragrade runner` on a compute node"))
    env: dict[str, str] = Field(default_factory=dict, description=(
        "More environment for the pilots' runners (PARAGRADE_SCRATCH_DIR, PARAGRADE_BACKEND…)"))
    every_s: float = Field(default=5.0, gt=0, description="Seconds between passes")
    queues: dict[Queue, QueuePolicy]

    def pilot_prefix(self, queue: str | None = None) -> str:
        return f"{self.name}-pilot-" + (f"{queue}-" if queue else "")


@dataclass(frozen=True)
class Pilot:
    """A pilot as the provider lists it."""

    name: str
    queue: str
    job_id: str
    state: Literal["pending", "running"]
    started_at: datetime | None = None


class Provider(Protocol):
    """Where pilots run (server/pilots.py)."""

    def pilots(self) -> list[Pilot]:
        """This fleet's pilots that wait for a node or run."""

    def start(self, *, name: str, queue: str, secret: str, policy: QueuePolicy) -> str:
        """Submit a pilot serving `queue` under `name` with credential `secret`; its job id."""

    def cancel(self, pilot: Pilot) -> None:
        """Withdraw a pilot (only ever one that waits for a node)."""


def needed(*, policy: QueuePolicy, queued: int, running: int, static: int) -> tuple[int, str]:
    """Runners the queue needs now (before the scale-in delay), and why, in words."""
    demand = queued + running
    wanted = math.ceil(demand / policy.jobs_per_runner) - static
    n = min(policy.max, max(policy.min, wanted))
    said = (f"{demand} job{'s' if demand != 1 else ''} ({queued} waiting, {running} running)"
            if demand else "no job waits or runs")
    per = f", {policy.jobs_per_runner} per runner" if policy.jobs_per_runner > 1 else ""
    fixed = f", {static} fixed runner{'s' if static != 1 else ''} serve{'s' if static == 1 else ''}" \
        if static else ""
    if n == wanted or (wanted <= 0 and n == 0):
        return n, f"{said}{per}{fixed}: {n} pilot{'s' if n != 1 else ''}"
    bound = "the maximum" if n == policy.max else "the minimum"
    return n, f"{said}{per}{fixed}: {max(wanted, 0)} wanted, {bound} is {n}"


class Hold:
    """The largest count asked for over the last `window_s` seconds: the scale-in delay."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self.samples: deque[tuple[float, int]] = deque()

    def add(self, at: float, n: int) -> int:
        self.samples.append((at, n))
        while self.samples and self.samples[0][0] < at - self.window_s:
            self.samples.popleft()
        return max(k for _, k in self.samples)


@dataclass
class Scaler:
    """The scaler's memory between passes: each queue's hold and its pilots' start times."""

    policy: FleetPolicy
    provider: Provider
    holds: dict[str, Hold] = field(default_factory=dict)
    starts: dict[str, deque[float]] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)  # pilots whose runner said hello

    def step(self, *, session: Session, live_s: int, max_attempts: int,
             at: datetime | None = None) -> list[QueueScale]:
        """One pass: end the credentials of pilots gone, then each queue's pilots to `desired`."""
        at = at or now()
        pilots = self.provider.pilots()
        self._end_gone(session, pilots, max_attempts)
        self._note_starts(session, pilots)
        depth = jobs.depth(session=session)
        live = fleet_service.live_runners(session=session, live_s=live_s)
        prefix = self.policy.pilot_prefix()
        rows = []
        for queue, qp in self.policy.queues.items():
            static = sum(1 for r in live if queue in r.queues and not r.name.startswith(prefix))
            n, why = needed(policy=qp, queued=depth[queue]["queued"],
                            running=depth[queue]["claimed"], static=static)
            desired = self.holds.setdefault(queue, Hold(qp.scale_in_delay_s)).add(
                at.timestamp(), n)
            if desired > n:
                why += f"; held at {desired} for {qp.scale_in_delay_s} s after the last peak"
            mine = [p for p in pilots if p.queue == queue]
            why = self._fit(session, queue, qp, mine, desired, at) or why
            rows.append(self._record(session, queue, desired, why, at, mine))
        session.commit()
        return rows

    def _withdraw(self, session: Session, pilot: Pilot, reason: str) -> None:
        self.provider.cancel(pilot)
        runner_credentials.end(session=session, name=pilot.name, max_attempts=1, reason=reason)

    def _fit(self, session: Session, queue: str, qp: QueuePolicy, mine: list[Pilot],
             desired: int, at: datetime) -> str | None:
        """Submit or withdraw pilots so that `desired` wait or run (`mine` is updated); a
        failure's words, if any."""
        for p in [p for p in mine if p.state == "pending"]:
            cred = session.get(RunnerCredential, p.name)
            if cred is not None and cred.expires_at is not None and aware(cred.expires_at) <= at:
                self._withdraw(session, p, "its pilot waited for a node past its credential")
                mine.remove(p)  # a fresh one below, if still needed
        surplus = len(mine) - desired
        if surplus > 0:
            waiting = sorted((p for p in mine if p.state == "pending"), key=lambda p: p.job_id)
            for p in waiting[::-1][:surplus]:  # the newest first: the oldest start soonest
                self._withdraw(session, p, "its pilot was withdrawn before it started")
                mine.remove(p)
            return None
        for _ in range(-surplus):
            name = f"{self.policy.pilot_prefix(queue)}{secrets.token_hex(4)}"
            secret = runner_credentials.add_pilot(
                session=session, name=name, queue=queue,
                expires_at=at + timedelta(seconds=qp.pending_limit_s + qp.time_limit_s))
            session.commit()  # the credential exists before its pilot can say hello
            try:
                job_id = self.provider.start(name=name, queue=queue, secret=secret, policy=qp)
                mine.append(Pilot(name=name, queue=queue, job_id=job_id, state="pending"))
            except PilotError as exc:
                runner_credentials.end(session=session, name=name, max_attempts=1,
                                   reason="its pilot could not be submitted")
                session.commit()
                return f"a pilot could not be submitted: {exc}"
        return None

    def _end_gone(self, session: Session, pilots: Iterable[Pilot], max_attempts: int) -> None:
        alive = {p.name for p in pilots}
        creds = session.scalars(select(RunnerCredential).where(
            RunnerCredential.name.startswith(self.policy.pilot_prefix(), autoescape=True),
            RunnerCredential.revoked_at.is_(None)))
        for cred in list(creds):
            if cred.name not in alive:
                runner_credentials.end(session=session, name=cred.name, max_attempts=max_attempts,
                                   reason="its pilot's batch job ended while it held the job")
                self.seen.discard(cred.name)
        for p in pilots:  # a pilot that runs: its credential ends with its allocation
            if p.state == "running" and p.started_at is not None:
                qp = self.policy.queues.get(p.queue)  # type: ignore[call-overload]
                if qp is not None:
                    runner_credentials.expire(session=session, name=p.name, at=p.started_at
                                          + timedelta(seconds=qp.time_limit_s + EXPIRY_GRACE_S))
        session.commit()

    def _note_starts(self, session: Session, pilots: Iterable[Pilot]) -> None:
        """How long each new pilot took from its submission (its credential's issue) to its
        runner's first hello."""
        new = [p for p in pilots if p.state == "running" and p.name not in self.seen]
        for p in new:
            row = session.execute(select(Runner.first_seen, RunnerCredential.created_at).join(
                RunnerCredential, RunnerCredential.name == Runner.name).where(
                Runner.name == p.name)).one_or_none()
            if row is None:
                continue  # started, but its runner has not said hello yet
            self.seen.add(p.name)
            took = (aware(row[0]) - aware(row[1])).total_seconds()
            self.starts.setdefault(p.queue, deque(maxlen=STARTS_KEPT)).append(max(0.0, took))

    def _record(self, session: Session, queue: str, desired: int, reason: str,
                at: datetime, pilots: list[Pilot]) -> QueueScale:
        row = session.get(QueueScale, queue) or QueueScale(queue=queue)
        if row not in session:
            session.add(row)
        starts = self.starts.get(queue)
        row.desired, row.reason, row.updated_at = desired, reason[:500], at
        row.pending = sum(1 for p in pilots if p.state == "pending")
        row.running = sum(1 for p in pilots if p.state == "running")
        row.start_s = statistics.median(starts) if starts else row.start_s
        return row


class PilotError(RuntimeError):
    """The provider could not submit a pilot (its words)."""


def load_policy(path: Path) -> FleetPolicy:
    """The scaler's TOML file, validated; ValueError naming what is wrong."""
    import tomllib

    from pydantic import ValidationError

    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ValueError(f"{path}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: not TOML: {exc}") from exc
    try:
        return FleetPolicy.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
                             for e in exc.errors())
        raise ValueError(f"{path}: {problems}") from exc

