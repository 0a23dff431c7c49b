"""Pilots on SLURM: a runner as a batch job (`sbatch`), listed by `squeue`, withdrawn by `scancel`.

A pilot's job runs `paragrade runner` for one queue on a compute node, under a credential of its
own. Nothing secret crosses on a command line or in the job's environment as SLURM stores it:
the scaler writes the secrets (the credential, the broker's URL) into a file only its user can
read, in the pilot's folder under `state_dir` (a filesystem the compute nodes share); the job's
script reads that file into the runner's environment and deletes it before the runner starts.
`--export=NONE` keeps the scaler's own environment (its database URL, the server's secret key)
out of the job. SLURM sends SIGUSR1 `drain_s` before the time limit (`--signal=B:USR1@…`, to the
batch shell, which `exec`s the runner): the runner drains (runners/fleet/leaving.py).
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import subprocess
from datetime import UTC, datetime

from server.services.fleet.autoscaling import FleetPolicy, Pilot, PilotError, QueuePolicy

log = logging.getLogger("paragrade.scaler")

PENDING = {"PENDING", "CONFIGURING", "REQUEUED", "RESIZING", "SUSPENDED"}
RUNNING = {"RUNNING", "COMPLETING", "STOPPED", "SIGNALING", "STAGE_OUT"}
SUBMIT_TIMEOUT_S = 60


def _minutes(seconds: int) -> str:
    """SLURM's time limit has whole minutes: rounded up, never under one."""
    return str(max(1, -(-seconds // 60)))


class SlurmPilots:
    """The SLURM provider of `paragrade admin scale` (server/services/fleet/autoscaling.py `Provider`)."""

    def __init__(self, policy: FleetPolicy, *, server: str, broker: str,
                 env: dict[str, str] | None = None) -> None:
        for tool in ("sbatch", "squeue", "scancel"):
            if shutil.which(tool) is None:
                raise PilotError(f"{tool} is not on PATH: run the scaler on a SLURM submit host")
        self.policy, self.server, self.broker = policy, server, broker
        self.env = env  # the SLURM client commands' own environment (SLURM_CONF); None: ours
        self.root = policy.state_dir
        self.root.mkdir(parents=True, exist_ok=True)

    def _run(self, argv: list[str]) -> str:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=SUBMIT_TIMEOUT_S,
                           env=self.env)
        if r.returncode != 0:
            raise PilotError(f"{argv[0]} failed: {(r.stderr or r.stdout).strip()[:400]}")
        return r.stdout

    def pilots(self) -> list[Pilot]:
        out = self._run(["squeue", "--noheader", "--user", str(os.getuid()),
                         "--format", "%i|%j|%T|%S"])
        prefix, found = self.policy.pilot_prefix(), []
        for line in out.splitlines():
            job_id, name, state, start = [*line.split("|"), "", "", ""][:4]
            if not name.startswith(prefix):
                continue
            queue = name.removeprefix(prefix).rsplit("-", 1)[0]
            if queue not in self.policy.queues or (state not in PENDING | RUNNING):
                continue
            started = None
            if state in RUNNING:
                try:
                    started = datetime.fromisoformat(start).astimezone(UTC)
                except ValueError:
                    started = None
            found.append(Pilot(name=name, queue=queue, job_id=job_id.strip(),
                               state="running" if state in RUNNING else "pending",
                               started_at=started))
        return found

    def start(self, *, name: str, queue: str, secret: str, policy: QueuePolicy) -> str:
        folder = self.root / name
        folder.mkdir(mode=0o700)
        secrets_file = folder / "secrets.env"
        fd = os.open(secrets_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"PARAGRADE_RUNNER_TOKEN={shlex.quote(secret)}\n"
                    f"PARAGRADE_BROKER_URL={shlex.quote(self.broker)}\n")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **self.policy.env,
               "PARAGRADE_RUNNER_SERVER": self.server, "PARAGRADE_RUNNER_NAME": name}
        runner = [self.policy.python, "-m", "paragrade.cli", "runner", "--queues", queue,
                  "--name", name, "--idle-exit", str(policy.idle_exit_s),
                  "--drain-s", str(policy.drain_s)]
        script = folder / "pilot.sh"
        script.write_text(
            "#!/bin/sh\n# a paragrade pilot: one runner for the queue, until idle or drained\n"
            + "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
            + f"set -a\n. {shlex.quote(str(secrets_file))}\nset +a\n"
            + f"rm -f {shlex.quote(str(secrets_file))}\n"
            + f"exec {shlex.join(runner)}\n")
        script.chmod(0o700)
        argv = ["sbatch", "--parsable", f"--job-name={name}", f"--time={_minutes(policy.time_limit_s)}",
                f"--signal=B:USR1@{policy.drain_s}", "--export=NONE", f"--chdir={folder}",
                f"--output={folder / 'runner.log'}", "--ntasks=1"]
        if policy.partition:
            argv.append(f"--partition={policy.partition}")
        argv += [*policy.sbatch, str(script)]
        try:
            job_id = self._run(argv).strip().split(";")[0]
        except (PilotError, subprocess.TimeoutExpired) as exc:
            secrets_file.unlink(missing_ok=True)
            raise PilotError(str(exc)) from exc
        log.info("pilot %s submitted for the %s queue: SLURM job %s", name, queue, job_id)
        return job_id

    def cancel(self, pilot: Pilot) -> None:
        try:
            self._run(["scancel", pilot.job_id])
        except PilotError as exc:  # it may have started or ended meanwhile: the next pass sees
            log.warning("cancelling pilot %s: %s", pilot.name, exc)
            return
        (self.root / pilot.name / "secrets.env").unlink(missing_ok=True)
        log.info("pilot %s withdrawn (SLURM job %s)", pilot.name, pilot.job_id)

