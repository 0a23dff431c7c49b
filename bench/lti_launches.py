"""Figure: many LTI launches at once against an LMS whose key set trickles, and /healthz meanwhile
(docs/security.md, "Requests the server makes for someone").

A real server process (`paragrade serve --no-runner`, SQLite, development settings, a fresh
var/ of its own), a stand-in LMS (tests/server/lms.py, a test double: no LMS runs here) whose
key set answers one byte a second, N launches posted at once from one asyncio client (each with
its own login's state cookie), and /healthz asked every 20 ms, from a process of its own, from a
second before the burst until every launch has answered.
Prints the launches' answers, how many key set fetches the LMS saw, and the worst and median
times of /healthz and /readyz.

Usage: .venv/bin/python -m bench.lti_launches [N] (default 100)
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx

from bench.common import publish
from tests.server.live import free_port, wait_until
from tests.server.lms import StandInLms
from tests.server.test_security_lti import Internal

PASSWORD = "orchid-lantern-gravel-41"


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    root = Path(tempfile.mkdtemp(prefix="paragrade-lti-bench-"))
    port = free_port()
    env = {**os.environ, "PARAGRADE_SERVER_DATABASE_URL": f"sqlite:///{root}/db.sqlite",
           "PARAGRADE_SERVER_ARTIFACTS_DIR": str(root / "artifacts"),
           "PARAGRADE_SERVER_SECRETS_FILE": str(root / "secrets.toml"),
           "PARAGRADE_SERVER_BROKER_URL": f"sqla+sqlite:///{root}/broker.sqlite",
           "PARAGRADE_SERVER_PUBLIC_URL": f"http://127.0.0.1:{port}"}
    paragrade = str(Path(sys.executable).parent / "paragrade")
    subprocess.run([paragrade, "admin", "create-instructor", "prof@uni.edu", "--password",
                    PASSWORD], env=env, check=True, capture_output=True)
    server = subprocess.Popen([paragrade, "serve", "--no-runner", "--port", str(port)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    trickle = Internal(b'{"keys": []}' + b" " * 60, trickle_s=1.0)  # a key set, a byte a second
    lms = StandInLms(tool=base)
    try:
        wait_until("the server", lambda: _up(base), 60, 0.2)
        token = httpx.post(f"{base}/api/auth/token", json={"email": "prof@uni.edu",
                                                           "password": PASSWORD}).json()["token"]
        prof = {"Authorization": f"Bearer {token}"}
        assert httpx.post(f"{base}/api/courses", headers=prof,
                          json={"slug": "lms", "title": "LMS"}).status_code == 201
        r = httpx.post(f"{base}/api/courses/lms/lti/platforms", headers=prof,
                       json={**lms.registration(), "key_set_url": f"{trickle.url}/jwks"})
        assert r.status_code == 201, r.text
        target = f"{base}/c/lms"
        launches = []
        for i in range(n):
            r = httpx.get(f"{base}/lti/login", params=lms.login_params(target))
            assert r.status_code == 302, r.text
            auth = {k: v[0] for k, v in parse_qs(urlparse(r.headers["location"]).query).items()}
            launches.append((dict(r.cookies), {"id_token": lms.id_token(
                nonce=auth["nonce"], target=target, sub=f"s{i}"), "state": auth["state"]}))
        answers, times, took = asyncio.run(_burst(base, launches))
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(20)
        lms.close()
        trickle.close()
        shutil.rmtree(root, ignore_errors=True)
    codes = answers
    row = {"launches": n, "seconds": took, "refused_403": codes.count(403),
           "shed_503": codes.count(503), "other": len([c for c in codes if c not in (403, 503)]),
           "key_set_fetches": trickle.hits,
           "healthz_max_ms": 1000 * max(times["/healthz"]),
           "healthz_median_ms": 1000 * statistics.median(times["/healthz"]),
           "readyz_max_ms": 1000 * max(times["/readyz"]),
           "readyz_median_ms": 1000 * statistics.median(times["/readyz"]),
           "asks": len(times["/healthz"])}
    publish("lti_launches", [row], {"launches": "launches", "seconds": "all answered s %.1f",
                                    "refused_403": "refused (403)", "shed_503": "shed (503)",
                                    "other": "other", "key_set_fetches": "key set fetches",
                                    "healthz_max_ms": "/healthz max ms %.0f",
                                    "healthz_median_ms": "/healthz median ms %.1f",
                                    "readyz_max_ms": "/readyz max ms %.0f",
                                    "readyz_median_ms": "/readyz median ms %.1f",
                                    "asks": "asks of each"})


def _up(base: str) -> bool:
    try:
        return httpx.get(f"{base}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _probe(base: str, started: float, stop: Any, out: Any) -> None:
    """Ask /healthz (answered on the event loop) and /readyz (a worker thread and the database)
    every 20 ms until `stop` is set, from a process of its own: a probe in the burst's own event
    loop would time the client's work too (its loop opens the 100 connections and writes the 100
    bodies while the probe's answer waits to be read)."""
    times: dict[str, list[float]] = {"/healthz": [], "/readyz": []}
    with httpx.Client(base_url=base, timeout=30) as probe:
        while not stop.is_set():
            for path, took in times.items():
                t0 = time.monotonic()
                assert probe.get(path).status_code == 200
                took.append(time.monotonic() - t0)
                if took[-1] > 0.1:
                    print(f"{path} took {took[-1] * 1000:.0f} ms at {t0 - started:.2f} s",
                          flush=True)
            time.sleep(0.02)
    out.put(times)


async def _burst(base: str, launches: list[tuple[dict[str, str], dict[str, str]]]
                 ) -> tuple[list[int], dict[str, list[float]], float]:
    ctx = multiprocessing.get_context("spawn")
    stop, out = ctx.Event(), ctx.Queue()
    started = time.monotonic()
    prober = ctx.Process(target=_probe, args=(base, started, stop, out))
    prober.start()
    await asyncio.sleep(1)  # the probe is asking before the burst
    limits = httpx.Limits(max_connections=len(launches) + 5)
    async with httpx.AsyncClient(base_url=base, timeout=120, limits=limits) as c:
        burst = time.monotonic()
        print(f"the burst at {burst - started:.2f} s", flush=True)
        answers = await asyncio.gather(*(c.post("/lti/launch", data=data, cookies=cookies)
                                         for cookies, data in launches))
        took = time.monotonic() - burst
    stop.set()
    times: dict[str, list[float]] = out.get(timeout=60)
    prober.join(10)
    return [a.status_code for a in answers], times, took


if __name__ == "__main__":
    main()
