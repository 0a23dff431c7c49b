"""Runs whose MPI ranks span several nodes: one sandbox per node, joined by a per-run overlay.

The leader node's sandbox runs `mpiexec` with MPICH's manual launcher (runners/harness/mpilaunch.py)
and rank 0, next to the grader's control socket; every other node's sandbox runs one MPI proxy,
built here from `PROXY_TEMPLATE` (never from anything a sandbox printed). The sandboxes share
nothing but the overlay (runners/nodes/overlay.py): separate pid, ipc and mount namespaces, so ranks on
different nodes talk over the network, as on a cluster. The run as a whole (`GangRunning`) is
timed, frozen and killed together, and its CPU time is the sum of every node's cgroup.

Whose fault an ending is: a node's sandbox that ends (a rank crashed, a limit hit) is the
submission's; a node whose host went away under the run (`Node.healthy`) is the platform's.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from runners.nodes import overlay
from runners.nodes.nodeagent import RemoteRunning
from runners.nodes.overlay import Node
from runners.sandbox.base import ExitInfo, Limits, Mount, Running, SandboxSpec, WallClock

if TYPE_CHECKING:
    from runners.sandbox import Executor
    from runners.settings import RunnerSettings

PROXY_TEMPLATE = (
    "{bin}/hydra_pmi_proxy --control-port {leader}:{port} --rmk user --launcher manual "
    "--demux poll --pgid 0 --retries 10 --usize -1 --pmi-port 0 --gpus-per-proc -2 "
    "--gpu-subdevs-per-proc -2 --proxy-id {k}"
)
"""What MPICH's manual launcher asks to run on node k (MPICH 5.0.2, runners/runtime-lock.txt; a
test compares it with what that mpiexec prints, so an upgrade that changes it fails there)."""
INSIDE_LAUNCHER = "mpilaunch.py"
POLL_S = 0.05


def held_nodes(settings: RunnerSettings, cpus: list[int]) -> list[Node]:
    """The nodes this runner holds for multi-node runs, the leader first ([] : none): a SLURM
    allocation's nodes when the engine runs in one of several nodes, else stand-in nodes."""
    if settings.slurm_job_id and settings.slurm_job_nodelist:
        names = slurm_hostnames(settings.slurm_job_nodelist)
        if len(names) > 1:
            return slurm_nodes(settings, settings.slurm_job_id, names, cpus)
    if settings.standin_nodes >= 2:
        return overlay.standin_nodes(settings.standin_nodes, cpus)
    return []


@functools.lru_cache(maxsize=8)
def slurm_hostnames(nodelist: str) -> list[str]:
    """A SLURM node list (`n[1-2]`) as names, in SLURM's order (asked once per list: every run
    of a grading asks)."""
    return _scontrol("show", "hostnames", nodelist).split()


def _scontrol(*args: str) -> str:
    """What `scontrol ARGS` prints; OverlayError when SLURM cannot answer."""
    try:
        return subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=30,
                              check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise overlay.OverlayError(f"scontrol {' '.join(args)}: {exc}") from exc


def slurm_nodes(settings: RunnerSettings, job_id: str, names: list[str], cpus: list[int]
                ) -> list[Node]:
    """The nodes of a SLURM job, in the order its prolog numbered them (the engine runs on the
    first). Each node's underlay is its NodeAddr; with stand-in nodes configured (a test cluster
    whose slurmd all run on one host) node `nK` stands on stand-in host K instead."""
    # Stand-in hosts stand for whole machines: the host's cores are split between them, whatever
    # this step of the job is bound to.
    every = list(range(os.cpu_count() or 1))
    standins = ({n.name: n for n in overlay.standin_nodes(settings.standin_nodes, every)}
                if settings.standin_nodes >= 2 else {})
    me = settings.slurmd_nodename
    if me is not None and me != names[0]:
        raise overlay.OverlayError(f"the engine runs on {me}, not on the job's first node "
                                   f"{names[0]}")
    nodes = []
    for name in names:
        if name in standins:
            base = standins[name]
        else:
            base = Node(name=name, underlay=slurm_node_address(name), cpus=tuple(cpus),
                        hardware=f"SLURM node {name}")
        nodes.append(replace(base, netns=overlay.job_netns(job_id, name), slurm_job=job_id,
                             hardware=f"{base.hardware} (SLURM job {job_id})"))
    return nodes


JOB_NAME_PREFIX = "paragrade-"
"""The SLURM backend names its jobs so (runners/nodes/slurm.py): the prolog acts on those only."""


def slurm_job_is_ours(job_id: str) -> bool:
    """Whether SLURM job `job_id` is a paragrade grading (a prolog leaves every other job alone)."""
    out = _scontrol("show", "job", "--oneliner", job_id)
    return any(f.startswith(f"JobName={JOB_NAME_PREFIX}") for f in out.split())


@functools.lru_cache(maxsize=64)
def slurm_node_address(name: str) -> str:
    """A SLURM node's address on the cluster network (its NodeAddr, resolved)."""
    out = _scontrol("show", "node", "--oneliner", name)
    addr = next((f.split("=", 1)[1] for f in out.split() if f.startswith("NodeAddr=")), name)
    try:
        return socket.gethostbyname(addr)
    except OSError as exc:
        raise overlay.OverlayError(f"node {name}'s address {addr} does not resolve") from exc


def placement(ranks: int, cores_per_node: int) -> list[int]:
    """Ranks on each node used: as few nodes as the ranks need, the ranks spread evenly."""
    return spread(ranks, max(1, math.ceil(ranks / cores_per_node)))


def spread(ranks: int, nodes: int) -> list[int]:
    return [ranks // nodes + (1 if k < ranks % nodes else 0) for k in range(nodes)]


def layout_text(per_node: list[int]) -> str:
    """'2 nodes × 1 rank' as a report says it."""
    if len(set(per_node)) == 1:
        r = per_node[0]
        return f"{len(per_node)} node{'s' * (len(per_node) > 1)} × {r} rank{'s' * (r > 1)}"
    return " + ".join(f"{r}" for r in per_node) + f" ranks on {len(per_node)} nodes"


def proxy_argv(runtime_bin: str, leader: str, k: int) -> list[str]:
    return PROXY_TEMPLATE.format(bin=runtime_bin, leader=leader, port=overlay.CONTROL_PORT,
                                 k=k).split()


def network_env(env: dict[str, str]) -> dict[str, str]:
    """The environment every node's sandbox gets: MPICH and UCX on the overlay's ports only."""
    return {**env, "HYDRA_LAUNCHER": "manual",
            "MPIEXEC_PORTRANGE": f"{overlay.CONTROL_PORT}:{overlay.CONTROL_PORT}",
            "UCX_TCP_PORT_RANGE": f"{overlay.RANK_PORTS[0]}-{overlay.RANK_PORTS[1]}",
            }


class GangRunning(Running):
    """One run over several nodes' sandboxes, seen as one: it is alive while every node's
    sandbox is, and its limits, freezing, killing and CPU time cover them all."""

    def __init__(self, nodes: list[Node], runs: list[Running], ov: overlay.Overlay | None,
                 *, together: bool = False) -> None:
        self.together = together
        """Its ranks serve until the run ends (a session's calls): a node whose sandbox ends,
        even well, has lost its ranks (a rank that died leaves MPICH's proxy to exit 0 and the
        leader's mpiexec waiting on it), so the run ends at once rather than seconds later."""
        self.nodes = nodes
        self.runs = runs
        self.overlay: overlay.Overlay | None = ov
        self.info = runs[0].info  # the leader's: what Session marks (timed_out) is merged in
        self.clock: WallClock = runs[0].clock
        self.stopped_by: list[str] = []
        self.stopped_failing = False  # a node's sandbox that stopped the run ended non-zero

    def alive(self) -> bool:
        return all(r.alive() for r in self.runs)

    def cpu_seconds(self) -> float | None:
        total = 0.0
        for r in self.runs:
            s = r.cpu_seconds()
            if s is None:
                return None
            total += s
        return total

    def roots(self) -> list[tuple[str | None, int | None]]:
        """Every node's sandbox (a node agent's, on another host, cannot be seen from here)."""
        return [(node.name, r.roots()[0][1]) for node, r in zip(self.nodes, self.runs,
                                                                strict=True)]

    def freeze(self, frozen: bool) -> bool:
        done: list[Running] = []
        for r in self.runs:
            if not r.freeze(frozen):
                for d in done:  # all or nothing
                    d.freeze(not frozen)
                return False
            done.append(r)
        return True

    def kill(self) -> None:
        for r in self.runs:
            r.kill()

    def _leader_end(self, timeout: float | None) -> ExitInfo | None:
        """The leader's ending. A node whose sandbox failed ends the run at once (after a rank
        died the leader's mpiexec may wait on the others for a long time), as does any node's
        ending where the ranks end together; otherwise one that ended well leaves the leader to
        end as it will, within its wall limit, as srun waits for every task: a program's ranks
        may end apart (rank 0 summing on after the others printed)."""
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            lead = self.runs[0].wait(POLL_S)
            if lead is not None:
                return lead
            ended = [i for r in self.runs[1:] if (i := r.wait(0)) is not None]
            failing = any(i.returncode != 0 for i in ended)
            if failing or (ended and self.together):
                self.stopped_failing = failing
                self.stopped_by = [n.name for n, r in zip(self.nodes[1:], self.runs[1:],
                                                          strict=True) if not r.alive()]
                self.runs[0].kill()
                return self.runs[0].wait(10)
            if end is not None and time.monotonic() >= end:
                return None

    def wait(self, timeout: float | None = None) -> ExitInfo | None:
        lead = self._leader_end(timeout)
        if lead is None:
            return None
        lost = [n.name for n in self.nodes if not n.healthy()]
        infos = [lead]
        for r in self.runs[1:]:  # the leader ended: nothing on the other nodes has work left
            r.kill()
            info = r.wait(10)
            infos.append(info if info is not None else ExitInfo(returncode=None))
        if self.overlay is not None:
            overlay.destroy(self.overlay)
            self.overlay = None
        merged = self.info
        for node, info in zip(self.nodes[1:], infos[1:], strict=True):
            merged.timed_out |= info.timed_out
            merged.output_exceeded |= info.output_exceeded
            merged.disk_exceeded |= info.disk_exceeded
            merged.oom_killed |= info.oom_killed
            merged.output_bytes += info.output_bytes
            if info.output_excerpt:
                merged.output_excerpt += f"\n[node {node.name}]\n{info.output_excerpt}"
        cpu = [i.cpu_s for i in infos]
        merged.cpu_s = None if any(c is None for c in cpu) else sum(c or 0.0 for c in cpu)
        lost += [n.name for n, i in zip(self.nodes[1:], infos[1:], strict=True) if i.node_lost]
        if lost:
            merged.node_lost = ", ".join(lost)
        elif self.stopped_by:
            merged.ranks_ended_on = ", ".join(self.stopped_by)
            how = "failed" if self.stopped_failing else "ended"  # MPICH's proxy exits 0 as its rank dies
            merged.output_excerpt += (f"\n[the MPI processes on node {', '.join(self.stopped_by)}"
                                      f" {how} while the run went on: it was stopped]\n")
        return merged


@dataclass(frozen=True)
class Plan:
    """A multi-node run as the launching side lays it out (runners/runs/launch.py): its nodes and
    ranks, its limits, the mounts every node's sandbox shares, the leader's work dir."""

    nodes: tuple[Node, ...]
    ranks: int
    executor: Executor
    runtime_dir: Path
    limits: Limits
    owner_uid: int  # who owns the nodes' work dirs (the sandbox's user)
    dir: Path  # the run's own folder on the trusted side
    mounts: list[Mount]  # the code, the harness, data
    harness: Mount
    work: Mount  # the leader's work dir; each follower gets one of its own
    python: str


def start(run: Plan, program: list[str], extra_mounts: list[Mount], env: dict[str, str], *,
          together: bool = False) -> Running:
    """Start `program` under MPI with its ranks on `run.nodes`: one sandbox per node
    (`together`: GangRunning.together)."""
    nodes = list(run.nodes)
    per_node = spread(run.ranks, len(nodes))
    ex = run.executor
    adopted = all(n.netns for n in nodes)  # a SLURM job's, made by its prolog
    ov = overlay.adopt(nodes) if adopted else overlay.create(nodes)
    runs: list[Running] = []
    try:
        hosts = run.dir / "hosts"
        hosts.write_text(ov.hosts_file())
        os.chmod(hosts, 0o644)
        shared = [*run.mounts, Mount(hosts, "/etc/hosts")]
        env = network_env(env)
        runtime_bin = f"{run.runtime_dir}/bin"
        hosts_arg = ",".join(f"{n.name}:{r}" for n, r in zip(nodes, per_node, strict=True))
        for k, (node, ranks) in enumerate(zip(nodes, per_node, strict=True)):
            limits: Limits = replace(run.limits, cpus=tuple(node.cpus[:ranks]) or node.cpus)
            if k == 0:
                argv = [run.python, "-I", "-B", f"{ex.path(run.harness)}/{INSIDE_LAUNCHER}",
                        "--hosts", hosts_arg, "--ranks", str(run.ranks), "--", *program]
                workdir, mounts = run.work, shared + extra_mounts
            else:
                argv = proxy_argv(runtime_bin, nodes[0].name, k)
                workdir, mounts = _follower_workdir(run, k), shared
            spec = SandboxSpec(argv=argv, mounts=mounts, workdir=workdir, env=env, limits=limits,
                               netns=ov.netns[k], hostname=node.name)
            if k > 0 and node.slurm_job is not None:
                runs.append(RemoteRunning(slurm_step(node, ex.name), spec))
            else:
                runs.append(ex.start(spec))
            if k == 0:
                _await_control_port(runs[0], ov.netns[0])
    except BaseException:
        for r in runs:
            r.kill()
            with contextlib.suppress(Exception):
                r.wait(10)
        if not adopted:
            overlay.destroy(ov)
        raise
    return GangRunning(nodes, runs, None if adopted else ov, together=together)


def slurm_step(node: Node, backend: str) -> list[str]:
    """The command that runs a node's agent as a step of the node's SLURM job, on that node."""
    return ["srun", f"--jobid={node.slurm_job}", "--overlap", "--nodes=1", "--ntasks=1",
            f"--nodelist={node.name}", "--quiet", "--input=all", "--unbuffered",
            sys.executable, "-m", "paragrade.cli", "node-sandbox", "--backend", backend]


def _listening(netns: str, port: int) -> bool:
    """Whether something listens on TCP `port` in the namespace (read by the trusted side from
    the kernel's table, never from the sandbox's output)."""
    proc = subprocess.run(["nsenter", f"--net={overlay.NETNS_DIR / netns}", "--", "cat",
                           "/proc/net/tcp"],
                          capture_output=True, text=True, timeout=10)
    want = f":{port:04X}"
    for line in proc.stdout.splitlines()[1:]:
        fields = line.split()
        if len(fields) > 3 and fields[1].endswith(want) and fields[3] == "0A":  # LISTEN
            return True
    return False


def _await_control_port(leader: Running, netns: str) -> None:
    """Wait until the leader's mpiexec accepts its proxies: MPICH's proxies give up on a port
    that is not open yet. A leader that ends first is left for the caller to find."""
    while leader.alive() and leader.clock.left() > 0:
        if _listening(netns, overlay.CONTROL_PORT):
            return
        time.sleep(0.02)


def _follower_workdir(run: Plan, k: int) -> Mount:
    work: Path = run.dir / f"work-node{k + 1}"
    work.mkdir(mode=0o700)
    if os.getuid() == 0:
        os.chown(work, run.owner_uid, run.owner_uid)
    return Mount(work, run.work.inside, writable=True)
