"""A private single-node SLURM cluster for the SLURM backend's tests (munged, slurmctld, slurmd).

Everything lives in one temporary folder (key, sockets, state, logs, free ports); clients find it
through SLURM_CONF. Needs root (slurmd starts jobs as their user) and Debian's slurm-wlm + munge.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from runners.settings import REPO_ROOT


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
    """munged + slurmctld + slurmd on this host, one partition `debug` of all its cores.

    With `nodes` > 1: that many slurmd (`slurmd -N nK`), the host's cores split between them,
    each node standing on the stand-in host of the same name (runners/nodes/overlay.py), and the
    shipped prolog/epilog (containers/slurm/) making every multi-node job's overlay."""

    def __init__(self, root: Path, nodes: int = 1) -> None:
        self.root = root
        self.nodes = nodes
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
        (root / "state").mkdir()
        cpus = os.cpu_count() or 1
        mem_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20 // 2
        if self.nodes == 1:
            node_lines = (f"NodeName={self.host} NodeAddr=127.0.0.1 CPUs={cpus} "
                          f"RealMemory={mem_mb} State=UNKNOWN\n"
                          f"PartitionName=debug Nodes={self.host} Default=YES MaxTime=INFINITE "
                          "State=UP\n")
            extra = ""
        else:
            names = [f"n{k + 1}" for k in range(self.nodes)]
            node_lines = "".join(
                f"NodeName={n} NodeHostname={self.host} NodeAddr=127.0.0.1 Port={_free_port()} "
                f"CPUs={max(1, cpus // self.nodes)} RealMemory={mem_mb // self.nodes} "
                "State=UNKNOWN\n" for n in names)
            node_lines += (f"PartitionName=debug Nodes={','.join(names)} Default=YES "
                           "MaxTime=INFINITE State=UP\n")
            hooks = {}
            for hook in ("prolog", "epilog"):  # the shipped scripts, told where paragrade is
                wrapper = root / f"{hook}.sh"
                wrapper.write_text(
                    f"#!/bin/sh\nexport PARAGRADE_PYTHON={sys.executable} "
                    f"PYTHONPATH={REPO_ROOT} PARAGRADE_STANDIN_NODES={self.nodes} "
                    f"PATH=/usr/sbin:/usr/bin:/sbin:/bin\n"
                    f"exec sh {REPO_ROOT / 'containers' / 'slurm' / f'{hook}.sh'} "
                    f">>{root}/{hook}.log 2>&1\n")
                wrapper.chmod(0o755)
                hooks[hook] = wrapper
            extra = (f"Prolog={hooks['prolog']}\nEpilog={hooks['epilog']}\nPrologFlags=Alloc\n")
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
SlurmdSpoolDir={root}/spool%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
MpiDefault=none
SchedulerParameters=batch_sched_delay=0,sched_min_interval=100000
{extra}{node_lines}""")
        self._spawn(["slurmctld", "-D", "-f", str(self.conf)], "slurmctld")
        if self.nodes == 1:
            self._spawn(["slurmd", "-D", "-f", str(self.conf)], "slurmd")
        else:
            for k in range(self.nodes):
                self._spawn(["slurmd", "-D", "-N", f"n{k + 1}", "-f", str(self.conf)],
                            f"slurmd-n{k + 1}")
        self._wait(self._idle, "the node to be idle", timeout)
        return self

    def _spawn(self, argv: list[str], name: str) -> None:
        log = (self.root / f"{name}.out").open("wb")
        self.procs.append(subprocess.Popen(argv, env=self.env, stdout=log,
                                           stderr=subprocess.STDOUT, start_new_session=True))

    def _idle(self) -> bool:
        r = subprocess.run(["sinfo", "-h", "-o", "%t"], env=self.env, capture_output=True,
                           text=True)
        return r.returncode == 0 and r.stdout.split() == ["idle"]

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
