"""A private single-node SLURM cluster for the SLURM backend's tests (munged, slurmctld, slurmd).

Everything lives in one temporary folder (key, sockets, state, logs, free ports); clients find it
through SLURM_CONF. Needs root (slurmd starts jobs as their user) and Debian's slurm-wlm + munge.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def missing() -> str | None:
    """Why a cluster cannot start here, or None."""
    if os.getuid() != 0:
        return "slurmd needs root"
    for tool in ("munged", "mungekey", "slurmctld", "slurmd", "srun", "sinfo", "runuser"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install slurm-wlm munge)"
    return None


class SlurmCluster:
    """munged + slurmctld + slurmd on this host, one partition `debug` of all its cores."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.procs: list[subprocess.Popen[bytes]] = []
        self.host = socket.gethostname().split(".")[0]
        self.conf = root / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    def start(self, timeout: float = 60) -> SlurmCluster:
        root = self.root
        munge_dir = root / "munge"  # every folder above it must be reachable by the munge user
        munge_dir.mkdir(parents=True)
        key, sock = munge_dir / "munge.key", munge_dir / "munge.socket"
        subprocess.run(["mungekey", "--create", f"--keyfile={key}"], check=True,
                       capture_output=True)
        shutil.chown(munge_dir, "munge", "munge")
        shutil.chown(key, "munge", "munge")
        key.chmod(0o600)
        munge_dir.chmod(0o755)  # clients (root) reach the socket; the key stays 0600
        root.chmod(0o755)
        self._spawn(["runuser", "-u", "munge", "--", "munged", "--foreground", "--force",
                     f"--key-file={key}", f"--socket={sock}", f"--pid-file={munge_dir}/munged.pid",
                     f"--log-file={munge_dir}/munged.log", f"--seed-file={munge_dir}/munged.seed"],
                    "munged")
        self._wait(lambda: sock.exists(), "munged", 15)
        for d in ("state", "spool"):
            (root / d).mkdir()
        cpus = os.cpu_count() or 1
        mem_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20 // 2
        self.conf.write_text(f"""\
ClusterName=paragrade-test
SlurmctldHost={self.host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={sock}
CredType=cred/munge
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
MpiDefault=none
SchedulerParameters=batch_sched_delay=0,sched_min_interval=100000
NodeName={self.host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={mem_mb} State=UNKNOWN
PartitionName=debug Nodes={self.host} Default=YES MaxTime=INFINITE State=UP
""")
        self._spawn(["slurmctld", "-D", "-f", str(self.conf)], "slurmctld")
        self._spawn(["slurmd", "-D", "-f", str(self.conf)], "slurmd")
        self._wait(self._idle, "the node to be idle", timeout)
        return self

    def _spawn(self, argv: list[str], name: str) -> None:
        log = (self.root / f"{name}.out").open("wb")
        self.procs.append(subprocess.Popen(argv, env=self.env, stdout=log,
                                           stderr=subprocess.STDOUT, start_new_session=True))

    def _idle(self) -> bool:
        r = subprocess.run(["sinfo", "-h", "-o", "%t"], env=self.env, capture_output=True,
                           text=True)
        return r.returncode == 0 and r.stdout.strip() == "idle"

    def _wait(self, ready: object, what: str, timeout: float) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if ready():  # type: ignore[operator]
                return
            if any(p.poll() is not None for p in self.procs):
                break
            time.sleep(0.2)
        logs = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-1500:]}"
                         for p in sorted(self.root.glob("*.out")) + sorted(self.root.glob("*.log")))
        self.stop()
        raise RuntimeError(f"the test SLURM cluster did not start ({what}):\n{logs}")

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
        self.procs.clear()
