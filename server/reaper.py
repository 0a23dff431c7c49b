"""Re-queues (or fails) jobs whose runner went silent past the time limit."""

from __future__ import annotations

import logging
import threading

from sqlalchemy.orm import Session, sessionmaker

from server.services import jobs as job_service

log = logging.getLogger("paragrade.reaper")


def start(sessions: sessionmaker[Session], *, timeout_s: int, max_attempts: int,
          every_s: float = 30.0) -> threading.Event:
    """Run the reaper in a daemon thread; set the returned event to stop it."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(every_s):
            try:
                with sessions() as session:
                    n = job_service.reap(session=session, timeout_s=timeout_s,
                                         max_attempts=max_attempts)
                    session.commit()
                if n:
                    log.warning("re-queued or failed %d stuck job(s)", n)
            except Exception:  # the reaper must outlive a database hiccup
                log.exception("reaper pass failed")

    threading.Thread(target=loop, name="paragrade-reaper", daemon=True).start()
    return stop
