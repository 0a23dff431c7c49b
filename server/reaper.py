"""The reaper: re-queues jobs whose runner went silent, publishes again what the broker lost,
moves GPU tasks that can be simulated between the GPU and the simulator queues as runners come
and go (services/fleet/routing.py), queues again the gradings timed while the node was short of
cores, starts the final run of an assignment whose last deadline passed (services/grades/finals.py),
tells students of a deadline a day away (services/grades/reminders.py), posts the grades owed
to LMS gradebooks (retrying those that failed), and deletes expired or revoked tokens, failed
logins older than the throttle's window and expired LTI launch data."""

from __future__ import annotations

import logging
import threading

from sqlalchemy.orm import Session, sessionmaker

from server.dispatch import Dispatcher
from server.services.fleet import outcomes as outcome_service
from server.services.fleet import retiming, routing
from server.services.grades import finals, reminders
from server.services.lti import launch as lti_launch
from server.services.lti import passback as lti_passback
from server.services.people import users as user_service
from server.services.records import jobs as job_service

log = logging.getLogger("paragrade.reaper")


def sweep(sessions: sessionmaker[Session], dispatcher: Dispatcher, *, lease_s: int,
          max_attempts: int, grace_s: float, login_window_s: int = 900,
          retime_after_s: int = 0, final_runs: bool = False, final_busy_wait_s: int = 0,
          live_s: int = 45) -> tuple[int, int]:
    """One pass: (jobs re-queued or failed, jobs published again)."""
    with sessions() as session:
        reaped = outcome_service.reap(session=session, lease_s=lease_s, max_attempts=max_attempts)
        session.commit()
    with sessions() as session:
        if moved := routing.reroute(session=session, live_s=live_s):
            log.info("moved %d GPU job(s) that can be simulated to the queue a live runner "
                     "serves", moved)
        session.commit()
    if retime_after_s:
        with sessions() as session:
            retimed = retiming.retime_due(session=session, after_s=retime_after_s)
            session.commit()
        if retimed:
            log.info("queued %d grading(s) measured while the node was short of cores again",
                     retimed)
    if final_runs:
        with sessions() as session:
            if started := finals.start_due(session=session, busy_wait_s=final_busy_wait_s):
                log.info("started the final run of %d assignment(s) past their last deadline",
                         started)
            session.commit()
    with sessions() as session:
        if ended := finals.expire_due(session=session):
            log.info("settled %d final run(s) at their busy limit: students short of clean "
                     "turns keep their live points, marked", ended)
        session.commit()
    with sessions() as session:
        if told := reminders.remind_due(session=session):
            log.info("told %d student(s) of a deadline a day away", told)
        session.commit()
    with sessions() as session:
        user_service.purge(session=session, login_window_s=login_window_s)
        lti_launch.purge(session=session)
        session.commit()
    sent, failed = lti_passback.send_pending(sessions=sessions)
    if failed:
        log.warning("%d grade(s) could not be posted to an LMS (sent %d); retried later",
                    failed, sent)
    republished = 0
    depth = dispatcher.depth()
    if depth is not None:
        with sessions() as session:
            republished = job_service.unpublished(session=session, broker_depth=depth,
                                                  grace_s=grace_s)
            session.commit()
    return reaped, republished


def start(sessions: sessionmaker[Session], dispatcher: Dispatcher, *, lease_s: int,
          max_attempts: int, every_s: float | None = None,
          login_window_s: int = 900, retime_after_s: int = 0, final_runs: bool = False,
          final_busy_wait_s: int = 0,
          live_s: int = 45) -> threading.Event:
    """Run the reaper in a daemon thread; set the returned event to stop it."""
    stop = threading.Event()
    every = every_s or max(1.0, min(15.0, lease_s / 3))

    def loop() -> None:
        while not stop.wait(every):
            try:
                reaped, republished = sweep(sessions, dispatcher, lease_s=lease_s,
                                            max_attempts=max_attempts, grace_s=2 * every,
                                            login_window_s=login_window_s,
                                            retime_after_s=retime_after_s,
                                            final_runs=final_runs,
                                            final_busy_wait_s=final_busy_wait_s, live_s=live_s)
                if reaped or republished:
                    log.warning("re-queued or failed %d job(s); published %d again",
                                reaped, republished)
            except Exception:  # the reaper must outlive a database or broker hiccup
                log.exception("reaper pass failed")

    threading.Thread(target=loop, name="paragrade-reaper", daemon=True).start()
    return stop
