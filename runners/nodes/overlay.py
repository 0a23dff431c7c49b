"""Per-run overlay networks: one network namespace per node, joined by VXLAN, reaching nothing else.

A run whose MPI ranks span nodes gets, on every node, a fresh namespace holding `lo` and one VXLAN
device (`ovl0`, the run's own VNI, static forwarding entries for the run's nodes only). The
device's UDP socket stays in the node's own (host) namespace, so encapsulated traffic crosses the
cluster network while the sandbox sees only the overlay: no default route, no IPv6, and an
nftables input policy that accepts only the run's own nodes on the run's port ranges. Every run's
namespaces use the same overlay addresses (`SUBNET`.k for node k): runs never share a namespace, so
they cannot collide, and a rank of one run has no route to another run's sandboxes (another VNI).

Stand-in nodes (`standin_nodes`) are network namespaces of this host joined by a bridge, each
standing for a node's host: real multi-node networking on one machine, for tests and for a
runner that demonstrates a gang without a cluster.

Only the runner (root) calls this module; nothing here runs inside a sandbox.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path

NETNS_DIR = Path("/run/netns")
RUN_PREFIX = "pg-j"
"""Run namespaces are named pg-j<owner pid>-<run id>-<node>: a sweep knows whose they are."""
SUBNET = "10.200.0"
DEVICE = "ovl0"
VXLAN_PORT = 4789
VXLAN_OVERHEAD = 50
"""Outer IPv4 + UDP + VXLAN + inner Ethernet headers: the overlay's MTU is the underlay's less this."""
CONTROL_PORT = 50100
"""The MPI launcher's one control port (on the leader)."""
RANK_PORTS = (50000, 50099)
"""Ports the ranks' transports (UCX/TCP) listen on: the only others a node accepts."""

STANDIN_BRIDGE = "pgstandin0"
STANDIN_HOST = "pg-h"
STANDIN_UNDERLAY = "192.168.77"
STANDIN_LOCK = "/run/paragrade-standin.lock"


class OverlayError(RuntimeError):
    """The overlay could not be built or a node's network is gone: the platform's fault."""


@dataclass(frozen=True)
class Node:
    """One node of a gang, as the leader's runner addresses it."""

    name: str
    """The node's name inside the sandboxes (their hostname): n1, n2, …"""
    underlay: str
    """The node's address on the cluster network (where its VXLAN socket lives)."""
    cpus: tuple[int, ...]
    """The cores of that node a run may use."""
    host_netns: str | None = None
    """Stand-in nodes: the namespace standing for the node's host (None: this host itself)."""
    hardware: str = ""
    """What the report says of the node (CPU model, cores, memory)."""
    netns: str | None = None
    """The namespace a SLURM prolog made for the job on this node (None: one is made per run)."""
    slurm_job: str | None = None
    """The SLURM job this node is allocated to: its sandbox starts as a step of that job."""

    def healthy(self) -> bool:
        """Whether the node's host is still there (a stand-in node's namespace exists)."""
        return self.host_netns is None or (NETNS_DIR / self.host_netns).exists()


@dataclass
class Overlay:
    """The namespaces of one run, node k's at index k."""

    run: str
    vni: int
    nodes: list[Node]
    netns: list[str]
    mtu: int

    def address(self, k: int) -> str:
        return f"{SUBNET}.{k + 1}"

    def hosts_file(self) -> str:
        """/etc/hosts for the run's sandboxes: each node's name on its overlay address."""
        lines = ["127.0.0.1 localhost"]
        lines += [f"{self.address(k)} {n.name}" for k, n in enumerate(self.nodes)]
        return "\n".join(lines) + "\n"

    def path(self, k: int) -> str:
        return str(NETNS_DIR / self.netns[k])


def _run(argv: list[str], *, stdin: str | None = None) -> str:
    try:
        proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise OverlayError(f"{' '.join(argv)}: {exc}") from exc
    if proc.returncode != 0:
        raise OverlayError(f"{' '.join(argv)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def _ip(netns: str | None, *args: str) -> str:
    return _run(["ip", *(["-n", netns] if netns else []), *args])


def _in(netns: str, *argv: str, stdin: str | None = None) -> str:
    return _run(["ip", "netns", "exec", netns, *argv], stdin=stdin)


def available() -> str | None:
    """None when overlays can be built here; else why not."""
    if os.geteuid() != 0:
        return "building per-run networks needs root (network namespaces, VXLAN)"
    for tool in ("ip", "nft", "bridge"):
        if not any((Path(d) / tool).exists() for d in os.get_exec_path()):
            return f"the '{tool}' command is missing (Debian: iproute2, nftables)"
    return None


def standin_problem(cpus: list[int]) -> str | None:
    """Why two stand-in nodes cannot be made from these cores on this host (None: they can):
    network namespaces need root and iproute2/nftables, and each node takes a core."""
    if len(cpus) < 2:
        return "stand-in nodes need two cores, and this machine has one"
    return available()


def _underlay_mtu(node: Node) -> int:
    """The MTU of the device that holds the node's underlay address."""
    for link in json.loads(_ip(node.host_netns, "-j", "addr", "show")):
        if any(a.get("local") == node.underlay for a in link.get("addr_info", [])):
            return int(link.get("mtu", 1500))
    raise OverlayError(f"node {node.name}: no device holds its address {node.underlay}")


def _firewall(nodes: int) -> str:
    """nftables rules for a run namespace: only the run's nodes, only the run's ports."""
    peers = ", ".join(f"{SUBNET}.{k + 1}" for k in range(nodes))
    return f"""
table inet paragrade {{
  chain input {{
    type filter hook input priority 0; policy drop;
    iif "lo" accept
    ct state established,related accept
    ip saddr {{ {peers} }} tcp dport {{ {RANK_PORTS[0]}-{RANK_PORTS[1]}, {CONTROL_PORT} }} accept
  }}
  chain output {{
    type filter hook output priority 0; policy drop;
    oif "lo" accept
    ct state established,related accept
    ip daddr {{ {peers} }} accept
  }}
}}
"""


def create(nodes: list[Node]) -> Overlay:
    """The namespaces of a new run over `nodes`, the leader first; removed again on failure."""
    run = secrets.token_hex(4)
    vni = 1 + secrets.randbelow((1 << 24) - 2)
    names = [f"{RUN_PREFIX}{os.getpid()}-{run}-{k + 1}" for k in range(len(nodes))]
    mtu = min(_underlay_mtu(n) for n in nodes) - VXLAN_OVERHEAD
    ov = Overlay(run=run, vni=vni, nodes=list(nodes), netns=[], mtu=mtu)
    try:
        for k in range(len(nodes)):
            _run(["ip", "netns", "add", names[k]])
            ov.netns.append(names[k])
            _configure(ov, names[k], k)
    except OverlayError:
        destroy(ov)
        raise
    return ov


def _configure(ov: Overlay, ns: str, k: int) -> None:
    """Node k's end of the overlay, in the (new, empty) namespace `ns`."""
    node = ov.nodes[k]
    # Made from the node's host namespace straight into the run's: its UDP socket stays on the
    # host side, and no half-made device is ever left on the host.
    _ip(node.host_netns, "link", "add", DEVICE, "netns", ns, "type", "vxlan", "id", str(ov.vni),
        "local", node.underlay, "dstport", str(VXLAN_PORT), "nolearning")
    for j, peer in enumerate(ov.nodes):
        if j != k:
            _run(["bridge", "-n", ns, "fdb", "append", "00:00:00:00:00:00", "dev", DEVICE,
                  "dst", peer.underlay])
    _in(ns, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1",
        "net.ipv6.conf.default.disable_ipv6=1")
    _ip(ns, "addr", "add", f"{ov.address(k)}/24", "dev", DEVICE)
    _ip(ns, "link", "set", DEVICE, "mtu", str(ov.mtu), "up")
    _ip(ns, "link", "set", "lo", "up")
    _in(ns, "nft", "-f", "-", stdin=_firewall(len(ov.nodes)))


def destroy(ov: Overlay) -> None:
    """Remove the run's namespaces (their devices and rules go with them)."""
    for ns in ov.netns:
        _delete(ns)
    ov.netns = []


def _delete(ns: str) -> None:
    # The device goes with the namespace once its last process is gone; deleting it first
    # frees the VNI on the host at once even if a straggler still holds the namespace.
    with contextlib.suppress(OverlayError):
        _ip(ns, "link", "del", DEVICE)
    with contextlib.suppress(OverlayError):
        _run(["ip", "netns", "delete", ns])


def _owner_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep() -> int:
    """Remove the run namespaces a killed runner left behind (never a live runner's)."""
    gone = 0
    if not NETNS_DIR.is_dir():
        return 0
    for entry in NETNS_DIR.iterdir():
        name = entry.name
        if not name.startswith(RUN_PREFIX):
            continue
        owner = name[len(RUN_PREFIX):].split("-", 1)[0]
        if owner.isdigit() and int(owner) != os.getpid() and _owner_alive(int(owner)):
            continue
        _delete(name)
        gone += 1
    return gone


def leftovers() -> list[str]:
    """This process's run namespaces that still exist (none once every run is closed)."""
    if not NETNS_DIR.is_dir():
        return []
    mine = f"{RUN_PREFIX}{os.getpid()}-"
    return sorted(e.name for e in NETNS_DIR.iterdir() if e.name.startswith(mine))


def standin_nodes(count: int, cpus: list[int]) -> list[Node]:
    """`count` stand-in nodes on this host (made if missing), the host's `cpus` split between them.

    Each is a namespace `pg-hK` with one address on a bridge that joins only them: the host
    itself has no address there, so nothing of this host is reachable from a node's network."""
    if count < 1 or len(cpus) < count:
        raise OverlayError(f"{count} stand-in nodes need at least {count} cores; "
                           f"this runner has {len(cpus)}")
    # Several processes may ask at once (a runner and its test process, the prologs of a job's
    # nodes): one makes them, under a lock, the others find them made.
    with open(STANDIN_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _standins(count, cpus)


def _standins(count: int, cpus: list[int]) -> list[Node]:
    if not (Path("/sys/class/net") / STANDIN_BRIDGE).exists():
        _ip(None, "link", "add", STANDIN_BRIDGE, "type", "bridge")
        _ip(None, "link", "set", STANDIN_BRIDGE, "up")
    per = len(cpus) // count
    nodes = []
    for k in range(1, count + 1):
        ns = f"{STANDIN_HOST}{k}"
        addr = f"{STANDIN_UNDERLAY}.{k}"
        if not (NETNS_DIR / ns).exists():
            _run(["ip", "netns", "add", ns])
            outer = f"pgsh{k}"
            with contextlib.suppress(OverlayError):
                _ip(None, "link", "del", outer)
            _ip(None, "link", "add", outer, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip(None, "link", "set", outer, "master", STANDIN_BRIDGE, "up")
            _ip(ns, "addr", "add", f"{addr}/24", "dev", "eth0")
            _ip(ns, "link", "set", "eth0", "up")
            _ip(ns, "link", "set", "lo", "up")
        mine = tuple(cpus[(k - 1) * per: k * per])
        nodes.append(Node(name=f"n{k}", underlay=addr, cpus=mine, host_netns=ns,
                          hardware=f"stand-in node {ns} on this host, cores {list(mine)}"))
    return nodes


def remove_standins() -> None:
    """Remove every stand-in node and their bridge."""
    if NETNS_DIR.is_dir():
        for entry in NETNS_DIR.iterdir():
            if entry.name.startswith(STANDIN_HOST) and entry.name[len(STANDIN_HOST):].isdigit():
                with contextlib.suppress(OverlayError):
                    _run(["ip", "netns", "delete", entry.name])
    with contextlib.suppress(OverlayError):
        _ip(None, "link", "del", STANDIN_BRIDGE)


def adopt(nodes: list[Node]) -> Overlay:
    """The overlay a SLURM prolog made for the job (`job_up` on every node), as a run uses it."""
    return Overlay(run="", vni=0, nodes=list(nodes), netns=[str(n.netns) for n in nodes], mtu=0)


def job_netns(job_id: str, node: str) -> str:
    """The namespace of SLURM job `job_id` on node `node` (the node's name keeps the names of
    several slurmd on one host apart)."""
    return f"{JOB_PREFIX}{job_id}-{node}"


JOB_PREFIX = "pg-s"


def _job_vni(job_id: str) -> int:
    """Every node of a job derives the same VNI from the job id, without talking to the others."""
    return 1 + int(job_id) % ((1 << 24) - 2)


def job_up(job_id: str, nodes: list[Node], me: str) -> str:
    """A SLURM prolog's work on node `me`: the job's namespace and this node's end of its
    overlay (node k of the allocation at `SUBNET`.k+1). Returns the namespace's name."""
    names = [n.name for n in nodes]
    if me not in names:
        raise OverlayError(f"node {me} is not in the job's node list {names}")
    k = names.index(me)
    node = nodes[k]
    ns = job_netns(job_id, me)
    if (NETNS_DIR / ns).exists():
        _delete(ns)  # a requeued job's leftovers
    mtu = _underlay_mtu(node) - VXLAN_OVERHEAD
    ov = Overlay(run=job_id, vni=_job_vni(job_id), nodes=nodes, netns=[ns], mtu=mtu)
    try:
        _run(["ip", "netns", "add", ns])
        _configure(ov, ns, k)
    except OverlayError:
        _delete(ns)
        raise
    return ns


def job_down(job_id: str, me: str) -> None:
    """A SLURM epilog's work on node `me`: the job's namespace goes."""
    ns = job_netns(job_id, me)
    if (NETNS_DIR / ns).exists():
        _delete(ns)
