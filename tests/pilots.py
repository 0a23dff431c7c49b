"""A platform whose cpu queue's runners follow the queue: the server on Redis, and
`paragrade admin scale` submitting pilots to a SLURM cluster (tests/test_autoscale.py,
bench/autoscale_burst.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import redis

from tests.server.live import Platform, wait_until
from tests.slurm_cluster import SlurmCluster

PACKAGES = Path(__file__).parent / "fixtures" / "queue"
REDIS = "redis://127.0.0.1:6379/0"


def available() -> bool:
    try:
        return bool(redis.Redis.from_url(REDIS, socket_connect_timeout=1).ping())
    except redis.RedisError:
        return False


class Scaled:
    """A platform on Redis, and `paragrade admin scale` keeping its cpu queue's pilots."""

    def __init__(self, tmp: Path, shared_dir: Path, slurm: SlurmCluster, *,
                 packages: Path = PACKAGES, queue: dict[str, int] | None = None) -> None:
        self.prefix = f"paragrade-test-{uuid.uuid4().hex[:8]}:"
        self.p = Platform(tmp, REDIS, key_prefix=self.prefix, assignments_dir=packages,
                          lease_s=30)
        self.cluster, self.name = slurm, f"t{uuid.uuid4().hex[:6]}"
        self.state = shared_dir / f"pilots-{self.name}"
        fleet = tmp / "fleet.toml"
        settings = {"max": 2, "idle_exit_s": 5, "scale_in_delay_s": 0, "time_limit_s": 1800,
                    "drain_s": 1200, **(queue or {})}  # the quick package's jobs have 800 s
        fleet.write_text(
            f'name = "{self.name}"\nserver = "{self.p.base}"\nbroker = "{REDIS}"\n'
            f'state_dir = "{self.state}"\nevery_s = 1\n'
            f'[env]\nPARAGRADE_BROKER_KEY_PREFIX = "{self.prefix}"\nPARAGRADE_HEARTBEAT_S = "1"\n'
            "[queues.cpu]\n" + "".join(f"{k} = {v}\n" for k, v in settings.items()))
        self.log = (tmp / "scaler.log").open("wb")
        self.scaler = subprocess.Popen(
            [sys.executable, "-m", "paragrade.cli", "admin", "scale", str(fleet)],
            env={**slurm.env, "PARAGRADE_SERVER_DATABASE_URL": self.p.settings.database_url,
                 "PARAGRADE_SERVER_ARTIFACTS_DIR": str(self.p.settings.artifacts_dir),
                 "PARAGRADE_SERVER_BROKER_URL": REDIS,
                 "PARAGRADE_SERVER_BROKER_KEY_PREFIX": self.prefix,
                 "PARAGRADE_SERVER_RUNNER_LIVE_S": "5"},
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        self.tmp = tmp

    def pilots(self) -> dict[str, tuple[str, str]]:
        """This fleet's SLURM jobs: name → (job id, state)."""
        out = subprocess.run(["squeue", "-h", "-o", "%i|%j|%T"], env=self.cluster.env,
                             capture_output=True, text=True, check=True).stdout
        return {name: (jid, state) for jid, name, state in
                (line.split("|") for line in out.splitlines()) if name.startswith(self.name)}

    def jobs(self) -> list[tuple[int, str, str | None]]:
        """Every job's id, state and last heartbeat: what moves while work is done."""
        from sqlalchemy import select

        from server.models import Job

        with self.p.sessions() as db:
            return [(j.id, j.state, str(j.heartbeat_at))
                    for j in db.scalars(select(Job).order_by(Job.id))]

    def fleet(self) -> dict:  # type: ignore[type-arg]
        return dict(self.p.get(self.p.prof, "/api/fleet")["queues"]["cpu"])

    def runner_log(self, pilot: str) -> str:
        f = self.state / pilot / "runner.log"
        return f.read_text(errors="replace") if f.exists() else ""

    def close(self) -> None:
        """Stop everything this started, each step whatever the one before did (a failing test
        or bench leaves no scaler, pilot, server or key behind)."""
        try:
            self.scaler.terminate()
            try:
                self.scaler.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.scaler.pid, signal.SIGKILL)
                self.scaler.wait(10)
        finally:
            try:
                for jid, _ in self.pilots().values():
                    subprocess.run(["scancel", jid], env=self.cluster.env, check=False)
                wait_until("the pilots to end", lambda: not self.pilots(), 60)
            finally:
                try:
                    self.p.close()
                finally:
                    r = redis.Redis.from_url(REDIS)
                    for key in r.scan_iter(f"{self.prefix}*"):
                        r.delete(key)
