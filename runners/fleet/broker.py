"""The runner's end of the Celery broker: the app, and a faster-polling embedded SQL transport.

kombu's SQLAlchemy transport polls once a second, which adds about half a second to every job,
and passes every transport option to `create_engine` (so `polling_interval` cannot be set
through the options). This subclass polls every 50 ms; the publisher (the server) needs nothing
special, since publishing is a plain insert.
"""

from __future__ import annotations

from typing import Any

from celery import Celery
from kombu.transport import sqlalchemy as kombu_sql
from sqlalchemy import Engine, create_engine

from runners.protocol import broker_options

POLL_S = 0.05
DRAIN_S = 0.25
"""The longest one wait for a message lasts before the worker's loop looks whether to stop."""


class Channel(kombu_sql.Channel):
    def _engine_from_config(self) -> Engine:
        return create_engine(self.connection.client.hostname,
                             connect_args={"timeout": 30})  # wait for SQLite's write lock


class Transport(kombu_sql.Transport):
    Channel = Channel
    polling_interval = POLL_S

    def drain_events(self, connection: Any, timeout: Any = None) -> Any:  # type: ignore[override]
        # Celery's loop for a transport like this one waits 2 s for a message, looks for a
        # stop, then waits once more before it stops: a runner took 4 s to end on SIGTERM.
        # Waiting DRAIN_S at a time, it ends within twice that (a caller that waits for good,
        # no timeout, still does).
        return super().drain_events(  # type: ignore[no-untyped-call]
            connection, timeout=None if timeout is None else min(timeout, DRAIN_S))


def consumer_app(broker_url: str, key_prefix: str = "") -> Celery:
    """A Celery app that consumes paragrade's queues from `broker_url` (redis:// or sqla+…)."""
    app = Celery("paragrade-runner", set_as_current=False)
    conf: dict[str, Any] = {
        "broker_url": broker_url,
        "broker_transport_options": broker_options(broker_url, key_prefix),
        # A job is acknowledged when it ends, one at a time: a runner that dies mid-job leaves
        # it to be delivered again, and one timed job never shares the node with another.
        "task_acks_late": True,
        "worker_prefetch_multiplier": 1,
        "worker_concurrency": 1,
        "task_serializer": "json",
        "accept_content": ["json"],
        "worker_enable_remote_control": False,  # the fleet reports over HTTP instead
        "worker_hijack_root_logger": False,
        "broker_connection_retry_on_startup": True,
        "broker_connection_max_retries": None,
    }
    if broker_url.startswith("sqla+"):
        conf["broker_url"] = broker_url.removeprefix("sqla+")
        conf["broker_transport"] = f"{__name__}:Transport"
    app.conf.update(conf)
    return app
