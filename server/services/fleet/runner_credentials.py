"""Who may serve the queues: runner credentials, the fleet token, and the names runners use.

Two kinds of secret open `/api/runner/*`:

- **A runner's own credential** (`paragrade admin runner add NAME --queues …`), the production
  path. Its name is the runner's: a runner cannot say hello, claim, fetch or report under
  another name, and it claims only jobs of the queues its credential names (a CPU node's
  credential cannot take a GPU job, whose hidden tests it would otherwise read). Revoking it
  refuses it at once, for the jobs it holds too, and puts those jobs back in their queue.
- **The fleet token** (`PARAGRADE_SERVER_RUNNER_TOKEN`), one secret every runner may present:
  how the one-command development start hands its local runner a secret with no manual step.
  Its holder may serve any queue under any name no credential holds. A production server
  accepts it only where the operator set it.

A name belongs to a credential, not to one process: replicas started from one credential (a
scaled compose service, a Kubernetes deployment) serve under one name, and a restarted runner
takes its name back at once. What tells a runner's processes apart is each one's own key: a
job answers only the process that claimed it (services/fleet/claims.py).

A credential's secret is 256 random bits, stored as its SHA-256. A slow password hash (argon2)
protects secrets people choose, which a guesser can enumerate; nobody enumerates 2^256, so a
fast hash loses nothing, and it lets every runner request (a heartbeat every 10 s per runner)
find its credential by an indexed lookup instead of costing an argon2 verification (tens of
milliseconds and tens of MiB) each. No key is mixed in: the server's secret key can then be
rotated without re-issuing every runner's credential. Bearer tokens are stored the same way.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from runners.protocol import QUEUES, RunnerHello
from server import security
from server.models import Job, Runner, RunnerCredential, aware, now
from server.services.fleet import claims as claim_service
from server.services.fleet import outcomes as outcome_service
from server.services.fleet import state as fleet_service
from server.services.records.errors import Conflict, Forbidden, Invalid, NotFound, Unauthenticated

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
"""A credential's name: it is also the runner's Celery host name and goes on command lines."""


@dataclass(frozen=True)
class RunnerIdentity:
    """Who a runner request comes from: a credential's runner, or a fleet-token holder."""

    name: str | None  # the credential's; None: the fleet token, any name no credential holds
    queues: frozenset[str]


def identify(*, session: Session, token: str, fleet_token: str | None) -> RunnerIdentity:
    """The runner a bearer secret names; Unauthenticated for an unknown or revoked one."""
    if fleet_token is not None and security.same_secret(token, fleet_token):
        return RunnerIdentity(name=None, queues=frozenset(QUEUES))
    row = session.scalar(select(RunnerCredential).where(
        RunnerCredential.token_hash == security.token_hash(token)))
    if row is None:
        raise Unauthenticated("not a runner credential (unknown, or the fleet token is not "
                              "accepted here)")
    if row.revoked_at is not None:
        raise Unauthenticated(f"runner {row.name}'s credential was revoked on "
                              f"{aware(row.revoked_at):%Y-%m-%d %H:%M} UTC; ask the operators "
                              "for a new one")
    if row.expires_at is not None and aware(row.expires_at) <= now():
        raise Unauthenticated(f"runner {row.name}'s credential expired on "
                              f"{aware(row.expires_at):%Y-%m-%d %H:%M} UTC (a pilot's credential "
                              "ends with its batch job)")
    return RunnerIdentity(name=row.name, queues=frozenset(row.queues))


def _held_by_credential(session: Session, name: str) -> bool:
    return session.get(RunnerCredential, name) is not None


def check_name(*, session: Session, identity: RunnerIdentity, name: str) -> None:
    """Refuse a runner request made under a name its secret does not give it."""
    if identity.name is not None and name != identity.name:
        raise Forbidden(f"this is runner {identity.name}'s credential: it cannot act as "
                        f"{name!r} (start the runner with --name {identity.name}, or "
                        "PARAGRADE_RUNNER_NAME)")
    if identity.name is None and _held_by_credential(session, name):
        raise Forbidden(f"the runner name {name!r} belongs to a runner credential: that runner "
                        "presents its own, not the fleet token")


def announced(*, session: Session, identity: RunnerIdentity, name: str) -> frozenset[str]:
    """The queues a runner said in its hello that it serves, as far as its credential allows
    (none before its hello): those it consumes messages from, so it may take their jobs."""
    said = session.get(Runner, name)
    return frozenset() if said is None else frozenset(identity.queues) & frozenset(said.queues)


def served(*, session: Session, identity: RunnerIdentity, name: str) -> frozenset[str]:
    """The queues a runner may claim from: its credential's, narrowed to those it said it serves
    in its hello (a message whose job moved to another queue, services/fleet/routing.py, is refused
    by a runner that does not serve that queue, rather than served by it)."""
    announced = session.get(Runner, name)
    if announced is None:
        return frozenset(identity.queues)
    return frozenset(identity.queues) & frozenset(announced.queues)


def authorize(*, session: Session, identity: RunnerIdentity, job_id: int, token: str,
              key: str) -> Job:
    """The claimed job a runner asks about (services/fleet/claims.py `authorize`), if it is this
    runner's: a credential's job answers that credential alone, never the fleet token."""
    job = claim_service.authorize(session=session, job_id=job_id, token=token, runner_key=key,
                                  runner=identity.name)
    if identity.name is None and job.runner is not None and _held_by_credential(session,
                                                                                job.runner):
        raise Forbidden("this job was claimed by another runner")
    return job


def check_queues(*, identity: RunnerIdentity, name: str, queues: Iterable[str]) -> None:
    """Refuse queues the runner's credential does not allow."""
    extra = sorted(set(queues) - identity.queues)
    if extra:
        raise Forbidden(f"runner {name}'s credential does not serve the {', '.join(extra)} "
                        f"queue{'s' if len(extra) > 1 else ''} (it serves "
                        f"{', '.join(sorted(identity.queues))})")


def hello(*, session: Session, identity: RunnerIdentity, runner: RunnerHello) -> None:
    """A runner's hello, under the name and on the queues its secret gives it."""
    check_name(session=session, identity=identity, name=runner.name)
    check_queues(identity=identity, name=runner.name, queues=runner.queues)
    fleet_service.hello(session=session, runner=runner)


# --- the operators' side (`paragrade admin runner …`) --------------------------------------


def parse_queues(text: str) -> list[str]:
    """'cpu,mpi' → ['cpu', 'mpi'] (in the protocol's order); Invalid naming what is wrong."""
    wanted = [q.strip() for q in text.split(",") if q.strip()]
    unknown = sorted(set(wanted) - set(QUEUES))
    if unknown or not wanted:
        raise Invalid(f"unknown queue(s) {', '.join(unknown) or '(none given)'}: use "
                      f"{', '.join(QUEUES)}")
    return [q for q in QUEUES if q in wanted]


def add(*, session: Session, name: str, queues: list[str]) -> str:
    """Issue a credential for runner `name` serving `queues`; its secret, shown this once.
    A revoked credential's name may be issued again (with a new secret)."""
    if not NAME.fullmatch(name):
        raise Invalid(f"{name!r} is not a runner name: 1 to 100 letters, digits, '.', '_' or "
                      "'-', starting with a letter or digit")
    queues = parse_queues(",".join(queues))
    secret = security.new_token()
    row = session.get(RunnerCredential, name)
    if row is not None and row.revoked_at is None:
        raise Conflict(f"runner {name} already has a credential: revoke it first "
                       f"(paragrade admin runner revoke {name}) to issue a new one")
    if row is None:
        row = RunnerCredential(name=name)
        session.add(row)
    row.token_hash, row.queues, row.created_at, row.revoked_at, row.expires_at = (
        security.token_hash(secret), queues, now(), None, None)
    session.flush()
    return secret


def add_pilot(*, session: Session, name: str, queue: str, expires_at: datetime) -> str:
    """Issue a pilot (a runner the fleet scaler starts as a batch job) a credential of its own
    for one queue, ending at `expires_at`; its secret, handed to that job alone."""
    secret = add(session=session, name=name, queues=[queue])
    row = session.get(RunnerCredential, name)
    assert row is not None
    row.expires_at = expires_at
    session.flush()
    return secret


def expire(*, session: Session, name: str, at: datetime) -> None:
    """Bring a credential's end forward to `at` (a pilot's job started: it ends with its time
    limit, not with the longest it might have waited)."""
    row = session.get(RunnerCredential, name)
    if row is not None and (row.expires_at is None or aware(row.expires_at) > at):
        row.expires_at = at
        session.flush()


def end(*, session: Session, name: str, max_attempts: int, reason: str) -> int:
    """A pilot's batch job is gone: refuse its credential from now on and put what it held back
    in the queue at once (rather than after the job's lease runs out); how many jobs went back."""
    row = session.get(RunnerCredential, name)
    if row is None or row.revoked_at is not None:
        return 0
    row.revoked_at = now()
    return _release_held(session, name, max_attempts, reason)


def _release_held(session: Session, name: str, max_attempts: int, reason: str) -> int:
    held = list(session.scalars(select(Job).where(Job.state == "claimed", Job.runner == name)))
    for job in held:
        outcome_service.release(session=session, job=job, max_attempts=max_attempts,
                                reason=reason)
    session.flush()
    return len(held)


def revoke(*, session: Session, name: str, max_attempts: int) -> int:
    """Refuse runner `name`'s credential from now on and put the jobs it holds back in their
    queues (a platform retry, never charged to a student); how many went back."""
    row = session.get(RunnerCredential, name)
    if row is None:
        raise NotFound(f"no runner credential named {name!r} (paragrade admin runner list)")
    if row.revoked_at is not None:
        raise Conflict(f"runner {name}'s credential is already revoked")
    row.revoked_at = now()
    return _release_held(session, name, max_attempts,
                         f"runner {name}'s credential was revoked while it held the job")


@dataclass(frozen=True)
class CredentialState:
    name: str
    queues: list[str]
    created_at: datetime
    revoked_at: datetime | None
    expires_at: datetime | None  # a pilot's: ends with its batch job
    last_seen: datetime | None  # its runner's last hello or heartbeat


def listing(*, session: Session) -> list[CredentialState]:
    """Every credential, revoked ones included, with when its runner was last heard from."""
    rows = session.execute(select(RunnerCredential, Runner.last_seen).outerjoin(
        Runner, Runner.name == RunnerCredential.name).order_by(RunnerCredential.name))
    return [CredentialState(name=c.name, queues=list(c.queues), created_at=aware(c.created_at),
                            revoked_at=None if c.revoked_at is None else aware(c.revoked_at),
                            expires_at=None if c.expires_at is None else aware(c.expires_at),
                            last_seen=None if seen is None else aware(seen))
            for c, seen in rows]
