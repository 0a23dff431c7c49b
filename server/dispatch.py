"""Publishing jobs to the Celery broker, after the transaction that created them commits.

A message carries a job id and nothing else the runner must trust: the runner claims the job over
HTTP, so the database stays the truth. A message that is lost (broker restarted, publish failed)
is published again by the reaper's sweep; one delivered twice is refused at the claim.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from celery import Celery
from sqlalchemy import Engine, event
from sqlalchemy.orm import Session, sessionmaker

from runners.protocol import QUEUES, TASK_NAME, broker_options
from server.db import make_engine, session_factory
from server.settings import ServerSettings

log = logging.getLogger("paragrade.dispatch")
OUTBOX = "paragrade.outbox"


@dataclass(frozen=True)
class Message:
    job_id: int
    queue: str
    priority: int
    time_limit_s: int


def outbox(session: Session) -> list[Message]:
    """Messages to publish once this session's transaction commits."""
    box: list[Message] = session.info.setdefault(OUTBOX, [])
    return box


class Dispatcher:
    """The server's end of the broker: publish job ids, read queue depths."""

    def __init__(self, broker_url: str, key_prefix: str = "") -> None:
        if broker_url.startswith("sqla+sqlite:///"):  # the embedded broker's file needs a folder
            Path(broker_url.removeprefix("sqla+sqlite:///")).parent.mkdir(parents=True,
                                                                          exist_ok=True)
        self.app = Celery("paragrade-server", broker=broker_url, set_as_current=False)
        self.app.conf.update(broker_transport_options=broker_options(broker_url, key_prefix),
                             task_serializer="json", accept_content=["json"],
                             broker_connection_retry_on_startup=True)

    def attach(self, sessions: sessionmaker[Session]) -> sessionmaker[Session]:
        """Publish each session's outbox after it commits; drop it when it rolls back."""
        event.listen(sessions, "after_commit", self._after_commit)
        event.listen(sessions, "after_rollback", lambda s: s.info.pop(OUTBOX, None))
        return sessions

    def _after_commit(self, session: Session) -> None:
        self.publish(session.info.pop(OUTBOX, []))

    def publish(self, messages: list[Message]) -> int:
        """Send each message; failures are logged (the sweep publishes them again)."""
        sent = 0
        for m in messages:
            try:
                self.app.send_task(
                    TASK_NAME, args=[m.job_id], queue=m.queue, priority=m.priority,
                    time_limit=m.time_limit_s + 60, soft_time_limit=m.time_limit_s,
                    retry=True, retry_policy={"max_retries": 2, "interval_start": 0,
                                              "interval_step": 0.2, "interval_max": 0.5})
                sent += 1
            except Exception:  # the broker is down: the job stays queued in the database
                log.exception("publishing job %s to %s failed", m.job_id, m.queue)
        return sent

    def depth(self) -> dict[str, int] | None:
        """Messages waiting in each queue of the broker; None when the broker is unreachable."""
        try:
            with self.app.connection_for_write() as conn:
                conn.ensure_connection(max_retries=1)
                channel = conn.default_channel
                out = {}
                for q in QUEUES:
                    # Not passive: kombu's existence check ignores a Redis key prefix and would
                    # call every queue missing. Declaring is idempotent (publishing declares too).
                    out[q] = int(channel.queue_declare(queue=q, durable=True,
                                                       auto_delete=False).message_count)
                return out
        except Exception:
            log.warning("the broker is unreachable", exc_info=True)
            return None


def publishing_sessions(settings: ServerSettings, engine: Engine | None = None
                        ) -> tuple[sessionmaker[Session], Dispatcher]:
    """Sessions over the settings' database whose commits publish the jobs they queued."""
    dispatcher = Dispatcher(settings.broker_url, settings.broker_key_prefix)
    sessions = session_factory(engine or make_engine(settings.database_url))
    return dispatcher.attach(sessions), dispatcher
