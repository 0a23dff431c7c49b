"""MPI runs whose ranks span two stand-in nodes (network namespaces of this host, each node's
sandbox on a per-run VXLAN overlay), built with the project's own code: runners/nodes/overlay.py and
runners/nodes/gang.py through configure.make_config, Session and grade."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runners import package
from runners.grading import grader, validate
from runners.nodes import gang, hardware, overlay
from runners.protocol import TestOutcome, Verdict
from runners.runs import configure
from runners.runs.failures import SubmissionFailure
from runners.runs.runconfig import RunConfig
from runners.runs.session import Session
from runners.runs.stage import Stage
from runners.sandbox import cgroups, create_executor
from runners.settings import REPO_ROOT, RunnerSettings, get_settings
from tests.conftest import COURSE
from tests.test_anchor import anchored_to_itself

pytestmark = [pytest.mark.multinode, pytest.mark.mpi]


def two_node_package(root: Path) -> Path:
    """t2 (mpi4py reduce and Scatter) as a package whose two ranks span two nodes."""
    dest = root / "t2-two-nodes"
    shutil.copytree(COURSE / "t2-mpi", dest)
    manifest = dest / "assignment.toml"
    text = manifest.read_text().replace('slug = "t2-mpi"', 'slug = "t2-two-nodes"')
    manifest.write_text(text.replace("ranks = 2\n", "ranks = 2\nnodes = 2\n"))
    return dest


@pytest.fixture(scope="module")
def nodes() -> Iterator[list[overlay.Node]]:
    why = overlay.available()
    if why:
        pytest.skip(why)
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("two stand-in nodes need two cores")
    made = not (overlay.NETNS_DIR / f"{overlay.STANDIN_HOST}1").exists()
    yield overlay.standin_nodes(2, sorted(os.sched_getaffinity(0)))
    assert overlay.leftovers() == [], "a run left its namespaces behind"
    if made:  # the host as the suite found it
        overlay.remove_standins()


@pytest.fixture(scope="module")
def two_nodes(nodes: list[overlay.Node], tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[tuple[package.Assignment, RunnerSettings]]:
    a = package.load(two_node_package(tmp_path_factory.mktemp("pkg")))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PARAGRADE_STANDIN_NODES", "2")  # the grader's test process holds them too
        get_settings.cache_clear()
        yield a, get_settings()
    get_settings.cache_clear()


def _cfg(a: package.Assignment, settings: RunnerSettings, stage: Stage, source: str,
         workers: int = 2, name: str = "submission") -> RunConfig:
    code = stage.add_code(name, {"solution.py": textwrap.dedent(source).encode()})
    return configure.make_config(a, executor=create_executor(settings, "bwrap"), stage=stage,
                                 code_dir=code, cpus=hardware.host_cpus(), workers=workers,
                                 gpu_mode="none", settings=settings)


PROBE = """
import errno, os, socket
from mpi4py import MPI

comm = MPI.COMM_WORLD


def where(size):
    me = {"rank": comm.rank, "host": socket.gethostname(),
          **{ns: os.readlink(f"/proc/self/ns/{ns}") for ns in ("net", "ipc", "pid", "mnt")}}
    payload = comm.bcast(bytes(size) if comm.rank == 0 else None, root=0)
    total = comm.allreduce(len(payload) + comm.rank)
    ranks = comm.gather(me, root=0)
    if comm.rank:
        return None
    return {"ranks": ranks, "total": total, "tcp": open("/proc/net/tcp").read()}


def _listen(port):
    s = socket.socket()
    try:
        s.bind(("0.0.0.0", port))
    except OSError:
        s.close()
        return None
    s.listen()
    return s


def _try(host, port):
    s = socket.socket()
    s.settimeout(1.5)
    try:
        s.connect((host, port))
        return "connected"
    except TimeoutError:
        return "timeout"
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc))
    finally:
        s.close()


def reach(targets, listen, linger=0.0):
    # Node 2 listens on each port of `listen`, or on the next free one: its own UCX listens in
    # the ranks' range too, and a port it took made the bind fail and rank 0 wait at the
    # barrier until the wall limit (seen once in CI). Rank 0 is told where, and reports under
    # the port asked for.
    server, bound = None, {}
    if comm.rank == 1:
        server = []
        for port in listen:
            for candidate in range(port, port + 20):
                if (s := _listen(candidate)) is not None:
                    server.append(s)
                    bound[port] = candidate
                    break
    bound = comm.bcast(bound, root=1)
    comm.barrier()
    out = {}
    if comm.rank == 0:
        for host, port in targets:
            out[f"{host}:{port}"] = _try(host, bound.get(port, port))
    if comm.rank == 1:
        import time
        time.sleep(linger)
    comm.barrier()
    return out if comm.rank == 0 else None


def _listening():
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in open(table).readlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            if state == "0A":
                ports.add(int(local.rsplit(":", 1)[1], 16))
    return ports


def hold_range(host, lo, hi, linger):
    # Node 2 listens on every port of [lo, hi] its own UCX left free; rank 0 connects to one.
    held = []
    if comm.rank == 1:
        held = [s for port in range(lo, hi + 1) if (s := _listen(port)) is not None]
    ports = comm.bcast([s.getsockname()[1] for s in held], root=1)
    comm.barrier()
    out = None
    if comm.rank == 0:
        s = socket.create_connection((host, ports[0]), timeout=1.5)
        s.close()
        out = {"held": len(ports), "connected": ports[0]}
    if comm.rank == 1:
        import time
        time.sleep(linger)
    comm.barrier()
    return out


def probe_range(host, lo, hi):
    # Rank 0 connects to every port of [lo, hi] on node 2 that node 2's own processes (its
    # UCX) do not listen on: what answers there can only be another run's.
    own = comm.bcast(sorted(_listening()) if comm.rank == 1 else None, root=1)
    comm.barrier()
    if comm.rank:
        return None
    return {str(port): _try(host, port) for port in range(lo, hi + 1) if port not in own}


def burn(cpu_s, wall_s):
    import time
    if comm.rank == 1:  # node 2 works while the leader's rank sleeps
        t = time.process_time()
        while time.process_time() - t < cpu_s:
            pass
    else:
        time.sleep(wall_s)
    comm.barrier()
    return comm.rank


def hold(seconds):
    if comm.rank == 1:
        import time
        time.sleep(seconds)
    comm.barrier()
    return comm.rank
"""


def _established(tcp: str, local: str, remote: str) -> list[str]:
    """Lines of /proc/net/tcp for established connections between two IPv4 addresses."""
    def hexed(ip: str) -> str:
        return socket.inet_aton(ip)[::-1].hex().upper()
    found = []
    for line in tcp.splitlines()[1:]:
        f = line.split()
        if f[3] == "01" and f[1].startswith(hexed(local)) and f[2].startswith(hexed(remote)):
            found.append(line)
    return found


def test_ranks_on_two_nodes_talk_over_the_overlay(two_nodes: tuple, stage: Stage) -> None:
    a, settings = two_nodes
    cfg = _cfg(a, settings, stage, PROBE)
    assert [n.name for n in cfg.nodes] == ["n1", "n2"]
    with Session(cfg) as s:
        out, _ = s.call("where", 4 << 20)
    ranks = {r["rank"]: r for r in out["ranks"]}
    assert sorted(ranks) == [0, 1]
    assert ranks[0]["host"] == "n1" and ranks[1]["host"] == "n2"
    for ns in ("net", "ipc", "pid", "mnt"):  # nothing shared but the overlay
        assert ranks[0][ns] != ranks[1][ns], ns
    assert out["total"] == 2 * (4 << 20) + 1
    # The 4 MiB went over TCP between the nodes' overlay addresses, not through shared memory.
    assert _established(out["tcp"], f"{overlay.SUBNET}.1", f"{overlay.SUBNET}.2"), out["tcp"]


def test_cpu_time_is_every_nodes(two_nodes: tuple, stage: Stage) -> None:
    a, settings = two_nodes
    with Session(_cfg(a, settings, stage, PROBE)) as s:
        running = s._run.proc
        assert isinstance(running, gang.GangRunning)
        before = [r.cpu_seconds() for r in running.runs]
        s.call("burn", 0.4, 2.5)
        after = [r.cpu_seconds() for r in running.runs]
        total = s.last_cpu_s
    used = [b - a for a, b in zip(before, after, strict=True)]  # type: ignore[operator]
    assert used[1] >= 0.4  # node 2's sandbox, where the work was
    assert used[0] < 0.3  # the leader's rank slept
    assert total is not None and abs(total - sum(used)) < 0.05


def _listen_in(netns: str | None, port: int) -> subprocess.Popen[bytes]:
    code = (f"import socket,time;s=socket.socket();s.bind(('0.0.0.0',{port}));s.listen();"
            "print('up',flush=True);time.sleep(120)")
    argv = [sys.executable, "-c", code]
    if netns:
        argv = ["ip", "netns", "exec", netns, *argv]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE)
    assert p.stdout is not None and p.stdout.readline() == b"up\n"
    return p


def _host_address() -> str:
    out = subprocess.run(["ip", "-4", "-o", "route", "get", "192.0.2.1"], capture_output=True,
                         text=True).stdout.split()
    return out[out.index("src") + 1] if "src" in out else "127.0.0.1"


def test_nothing_else_is_reachable_from_a_rank(two_nodes: tuple, nodes: list[overlay.Node],
                                                stage: Stage) -> None:
    a, settings = two_nodes
    host = _host_address()
    listeners = [_listen_in(None, 47011), _listen_in(nodes[1].host_netns, 47012)]
    try:
        inside, outside = overlay.RANK_PORTS[0] + 7, 40007
        targets = [
            (f"{overlay.SUBNET}.2", inside),   # the job's own other node, in its port range
            (f"{overlay.SUBNET}.2", outside),  # … outside it
            ("127.0.0.1", 47011),              # this host's loopback (the runner, broker, DB)
            ("127.0.0.1", 5432), ("127.0.0.1", 6379),
            (host, 47011),                     # this host's own address
            (nodes[1].underlay, 47012),        # the other node's host, on the cluster network
            (nodes[0].underlay, overlay.VXLAN_PORT),
            ("192.0.2.1", 80),                 # anywhere else
        ]
        with Session(_cfg(a, settings, stage, PROBE)) as s:
            got, _ = s.call("reach", targets, [inside, outside])
    finally:
        for p in listeners:
            p.kill()
            p.wait()
    at = {f"{h}:{p}": got[f"{h}:{p}"] for h, p in targets}
    assert at[f"{overlay.SUBNET}.2:{inside}"] == "connected"  # the probe can see what is there
    assert at[f"{overlay.SUBNET}.2:{outside}"] == "timeout"  # the node's firewall
    for h, p in targets[2:5]:
        assert at[f"{h}:{p}"] == "ECONNREFUSED", (h, p, at)  # the namespace's own loopback
    for h, p in targets[5:]:
        assert at[f"{h}:{p}"] in ("ENETUNREACH", "EPERM"), (h, p, at)


def test_a_second_run_cannot_reach_the_first(two_nodes: tuple, stage: Stage) -> None:
    a, settings = two_nodes
    lo, hi = overlay.RANK_PORTS
    node2 = f"{overlay.SUBNET}.2"
    first = Session(_cfg(a, settings, stage, PROBE))
    second = Session(_cfg(a, settings, stage, PROBE, name="second"))
    first.start()
    try:
        second.start()
        try:
            # The first run's node 2 listens on every free port of the ranks' range for the whole
            # call; the second run's rank 0 meanwhile tries each port of the very same overlay
            # address that its own node 2 does not hold (its UCX listens in that range too).
            done: dict[str, object] = {}

            def first_holds() -> None:
                try:
                    done["first"] = first.call("hold_range", node2, lo, hi, 4.0)[0]
                except SubmissionFailure as exc:  # what each node said, for the assertion
                    info = first.exit_info
                    done["first"] = f"{exc}; {info.output_excerpt if info else ''}"

            t = threading.Thread(target=first_holds)
            t.start()
            time.sleep(1.0)
            got, _ = second.call("probe_range", node2, lo, hi)
            t.join(30)
        finally:
            second.close()
    finally:
        first.close()
    first_got = done["first"]
    assert isinstance(first_got, dict), first_got
    span = hi - lo + 1
    # Each side leaves only its own UCX's few ports out, so the ports the first run held and
    # those the second probed overlap in at least held + probed - span of them.
    assert first_got["held"] + len(got) - span >= span // 2, (first_got, len(got))
    answered = {port: what for port, what in got.items() if what != "ECONNREFUSED"}
    assert answered == {}, answered


def test_a_lost_node_is_the_platforms_fault(two_nodes: tuple, nodes: list[overlay.Node],
                                            stage: Stage) -> None:
    a, settings = two_nodes
    s = Session(_cfg(a, settings, stage, PROBE))
    s.start()
    running = s._run.proc
    assert isinstance(running, gang.GangRunning)

    def lose_node_2() -> None:
        time.sleep(1.0)
        # The node's machine goes down: its network, and every process on it.
        subprocess.run(["ip", "netns", "delete", str(nodes[1].host_netns)], check=True)
        running.runs[1].kill()

    threading.Thread(target=lose_node_2).start()
    try:
        with pytest.raises(SubmissionFailure) as failure:
            s.call("hold", 30)
    finally:
        s.close()
        overlay.standin_nodes(2, sorted(os.sched_getaffinity(0)))  # the node comes back
    assert failure.value.verdict == Verdict.PLATFORM_ERROR
    assert "n2" in failure.value.message
    assert overlay.leftovers() == []


def test_the_proxy_template_is_what_mpiexec_asks_for(two_nodes: tuple, stage: Stage) -> None:
    """MPICH's manual launcher prints the proxy commands it waits for: the runner builds the
    followers' from a template, which must be the same command."""
    _, settings = two_nodes
    mpiexec = settings.runtime_dir / "bin" / "mpiexec"
    env = {**gang.network_env({"PATH": "/usr/bin:/bin"})}
    proc = subprocess.Popen([str(mpiexec), "-launcher", "manual", "-hosts", "n1:1,n2:1", "-n",
                             "2", "true"], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        if line.strip() == "HYDRA_LAUNCH_END":
            break
        lines.append(line.split(":", 1)[1].split() if line.startswith("HYDRA_LAUNCH:") else [])
    proc.kill()
    proc.wait()
    bin_dir = str(settings.runtime_dir / "bin")
    leader = socket.gethostname()  # in a run's sandbox: n1
    assert lines == [gang.proxy_argv(bin_dir, leader, 0), gang.proxy_argv(bin_dir, leader, 1)]


def _bad(source: str, old: str, new: str) -> str:
    assert old in source
    return source.replace(old, new)


@pytest.mark.slow
def test_two_node_package_graded(two_nodes: tuple) -> None:
    """Passed, failed and crashed on two nodes (the timed path: through the server, below)."""
    a, settings = two_nodes
    reference = package.code_of(a, "reference")
    r = grader.grade(a, reference, settings=settings, with_timing=False)
    assert r.verdict == Verdict.PASSED, (r.summary, [t.message for t in r.tests])
    assert [n.split(":")[0] for n in r.environment.nodes] == ["n1", "n2"]
    assert r.environment.network and "VXLAN" in r.environment.network

    src = reference["solution.py"].decode()
    wrong = _bad(src, "total = comm.reduce(local,", "total = comm.reduce(local * 2,")
    r = grader.grade(a, {"solution.py": wrong.encode()}, settings=settings, with_timing=False)
    assert r.verdict == Verdict.FAILED

    # Rank 1 dies in the largest test only. Its node's MPI proxy then exits 0 and the leader's
    # mpiexec waits on: the run is stopped as that node's sandbox ends (it once waited out a
    # 5 s grace, in every test, and read "killed").
    crash = _bad(src, "    local = partial_sum(", "    if rank == 1 and n > 10**6:\n"
                 "        import os\n        os._exit(3)\n    local = partial_sum(")
    r = grader.grade(a, {"solution.py": crash.encode()}, settings=settings, with_timing=False)
    assert r.verdict == Verdict.CRASHED, r.summary
    [died] = [t for t in r.tests if t.outcome is TestOutcome.FAILED]
    assert died.name.endswith("::test_large_sum"), r.tests
    assert "the MPI ranks on node n2 ended before answering" in died.message, died.message
    # (MPICH's proxy on n2 exited 0 though its rank exited 3: the note says "ended", not "failed")
    assert "[the MPI processes on node n2 ended while the run went on" in r.output_excerpt
    assert died.duration_s < 3, died.duration_s  # not a grace waited out (0.4 s here)
    assert overlay.leftovers() == []


SEED_FORM = COURSE / "t2-cluster"
COURSES_SCRIPT = ("#SBATCH --job-name=task2\n#SBATCH --partition=booster\n#SBATCH --ntasks=2\n"
                  "#SBATCH --cpus-per-task=64\n#SBATCH --gres=gpu:4\n"
                  "#SBATCH --account=training2425\n#SBATCH --output=job_output_task2_%j.log\n"
                  "#SBATCH --error=job_error_task2_%j.log\n#SBATCH --time=00:30:00\n"
                  "srun -v python3 task2.py\n")
"""The seed course's job script for task 2, with a made-up account and the package's 2 tasks."""


def test_the_seeds_batch_script_runs_its_ranks_on_two_nodes(two_nodes: tuple) -> None:
    _, settings = two_nodes
    a = package.load(SEED_FORM)
    reference = package.code_of(a, "reference")
    r = grader.grade(a, reference, settings=settings, with_timing=False)
    assert r.verdict == Verdict.PASSED, (r.summary, [t.message for t in r.tests])
    assert "ran task2.py as 2 MPI ranks on 2 nodes" in " ".join(r.notes)
    assert [n.split(":")[0] for n in r.environment.nodes] == ["n1", "n2"]

    script = reference["job.sh"].decode()
    one_node = script.replace("#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1",
                              "#SBATCH --nodes=1\n#SBATCH --ntasks=2")
    for bad, why in [
        (script.replace("--time=00:05:00", "--export=ALL"), "#SBATCH --export is not allowed"),
        (script.replace("task2.py", "task2.py > /tmp/x"), "shell syntax"),
        (script + "curl http://example.org\n", "'curl' may not"),
        (one_node, "more than the 1 cores of a node"),
    ]:
        assert bad != script
        r = grader.grade(a, {**reference, "job.sh": bad.encode()}, settings=settings)
        assert r.verdict == Verdict.FAILED and why in r.summary, (bad, r.summary)
        assert not r.tests  # nothing of it ran


def test_a_profile_on_two_nodes_samples_each_nodes_ranks(two_nodes: tuple) -> None:
    """The seed's batch script as a practice run with a profile: each node's sandbox sampled
    from its own side, one rank a row on n1 and one on n2, each summing in the student's
    `<genexpr>` (not "in MPI": the sum is the reduce's argument, on its line); mpiexec's
    launcher, which runs none of the student's code, is no row."""
    _, settings = two_nodes
    a = package.load(SEED_FORM)
    r = grader.grade(a, package.code_of(a, "reference"), settings=settings, practice="tests",
                     profile=True)
    p = r.profile
    assert r.verdict == Verdict.PASSED and p is not None and p.note is None, (r.summary, p)
    assert [(w.node, w.label) for w in p.processes] == [
        ("n1", "n1 · process 1"), ("n2", "n2 · process 1")], p.processes
    assert all(w.running >= 0.3 for w in p.processes), p.processes
    assert p.top[0].own and p.top[0].name == "<genexpr>", p.top[:3]


UNEVEN = b"""import os, sys, time

N = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
if os.environ.get("PMI_RANK") == "0":  # rank 0 alone does the work, no MPI: rank 1 ends at once
    time.sleep(1.5)  # past the second after which the rank left alone was once stopped
    print(f"total: {sum(i * 0.001 for i in range(N))!r}", flush=True)
"""


def test_ranks_that_end_apart_are_waited_for(two_nodes: tuple) -> None:
    """As srun waits for every task: rank 1 ending well at once leaves rank 0 to finish its
    work (it was stopped a second later, exit status 137); a rank that fails still fails the
    run, with its status."""
    _, settings = two_nodes
    a = package.load(SEED_FORM)
    reference = package.code_of(a, "reference")
    r = grader.grade(a, {**reference, "task2.py": UNEVEN}, settings=settings, with_timing=False)
    assert r.verdict == Verdict.PASSED, (r.summary, [t.message for t in r.tests])
    # Rank 0 still at work when rank 1 fails: 0.3 s of it is enough (1.5 s a test was 4.5 s).
    fails = UNEVEN.replace(b'if os.environ.get("PMI_RANK") == "0":',
                           b'if os.environ.get("PMI_RANK") == "1":\n    sys.exit(3)\nif True:'
                           ).replace(b"time.sleep(1.5)", b"time.sleep(0.3)")
    r = grader.grade(a, {**reference, "task2.py": fails}, settings=settings, with_timing=False)
    assert r.verdict != Verdict.PASSED
    assert "the job exited with status 3" in " ".join(t.message for t in r.tests), r


def test_the_shipped_two_node_package_validates_and_its_reference_works_on_both_nodes(
        two_nodes: tuple) -> None:
    """The treasure hunt's t2-cluster, the course's own form of task 2, on two stand-in nodes:
    every check of its package, its reference graded in full among them: 2 ranks on 2 nodes,
    busy at once, its work measured on both, credited."""
    _, settings = two_nodes
    checks = validate.validate(SEED_FORM, settings=settings, measure=True)
    bad = [f"{c.name}: {c.problems}" for c in checks if not c.ok]
    assert not bad, "\n".join(bad)
    assert len([c for c in checks if not c.skipped]) >= 4, checks
    r = next(c.report for c in checks if c.name == "reference passes")
    assert r is not None and r.verdict == Verdict.PASSED, r and r.summary
    assert r.scaling[-1].nodes == 2 and r.scaling[-1].cpu is not None, r.notes
    assert r.credit is not None and r.credit.status == "credited", r.credit
    # Both nodes' ranks worked at once (their CPU time over the run's wall time). The figure
    # itself is the host's hour as much as the code's (1.45-1.50x here in a noisy hour, 1.18x in
    # a noisier one): docs/students/reports.md has a report, docs/instructors the curve.
    assert r.scaling[-1].cpu.parallelism > 1.5, r.scaling[-1].cpu


def test_the_courses_own_script_passes_as_the_course_writes_it(two_nodes: tuple) -> None:
    """The seed course's job script for task 2, unchanged but for a made-up account and
    `--ntasks` set to the package's 2 ranks: its cluster's options are listed as not used here,
    `srun -v python3` is read, and the 2 tasks take the 2 nodes they need."""
    _, settings = two_nodes
    a = package.load(SEED_FORM)
    reference = package.code_of(a, "reference")
    r = grader.grade(a, {**reference, "job.sh": COURSES_SCRIPT.encode()}, settings=settings,
                     with_timing=False)
    assert r.verdict == Verdict.PASSED, (r.summary, [t.message for t in r.tests])
    notes = " ".join(r.notes)
    assert "ran task2.py as 2 MPI ranks on 2 nodes" in notes
    assert "not used here, the course's runner decides" in notes and "--partition=booster" in notes
    assert [n.split(":")[0] for n in r.environment.nodes] == ["n1", "n2"]


CLOSED_FORM = b"""import sys
from mpi4py import MPI
N = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
if MPI.COMM_WORLD.rank == 0:
    print(f"total: {0.001 * N * (N - 1) / 2!r}", flush=True)
"""


def test_a_closed_form_batch_job_on_two_nodes_earns_no_performance_points(
        two_nodes: tuple) -> None:
    """The course's batch script beside a program that prints the sum's closed form: every
    timed run's CPU time is read on both nodes (a node's sandbox that ended before the run was
    waited for lost it, and the credit rule fell back to "up to the allotted cores"), so the
    rule sees the work the program skipped and credits none of the figure (refused, or held
    for an instructor's review)."""
    _, settings = two_nodes
    a = package.load(SEED_FORM)
    reference = package.code_of(a, "reference")
    r = grader.grade(a, {**reference, "task2.py": CLOSED_FORM}, settings=settings)
    assert r.verdict == Verdict.PASSED, (r.summary, [t.message for t in r.tests])
    top = r.scaling[-1]
    assert top.nodes == 2 and top.cpu is not None, (r.summary, r.notes)
    assert r.credit is not None and r.credit.status in ("held", "refused"), r.credit
    assert r.credit.speedup == 0 and "of the baseline's work" in r.credit.reason, r.credit
    assert r.performance_points == 0, r.summary
    assert not any("parallelism not measured" in n for n in r.notes), r.notes


def test_a_package_may_score_the_work_after_start_up(two_nodes: tuple, tmp_path: Path) -> None:
    """`timing.startup = "excluded"`, as the course's own timer (started once MPI is up): each
    run less its side's start-up, said in the report. A closed form, whose runs are then next
    to nothing, still earns no performance points: its work is what the credit rule reads."""
    _, settings = two_nodes
    dest = tmp_path / "t2-cluster"
    shutil.copytree(SEED_FORM, dest)
    toml = dest / "assignment.toml"
    toml.write_text(toml.read_text().replace("[timing]\n", '[timing]\nstartup = "excluded"\n'))
    a = package.load(dest)
    assert a.manifest.timing.startup == "excluded"
    reference = package.code_of(a, "reference")
    r = grader.grade(a, reference, settings=settings)
    assert r.verdict == Verdict.PASSED and r.speedup is not None, r.summary
    assert any(n.startswith("scored on the work after start-up") for n in r.notes), r.notes
    assert not any(n.startswith("timed as whole programs") for n in r.notes), r.notes
    assert r.credit is not None and r.credit.status == "credited", r.credit
    assert r.speedup.median > 1.2, r.summary  # about 1.8 here: 2 ranks, less MPI's start
    r = grader.grade(a, {**reference, "task2.py": CLOSED_FORM}, settings=settings)
    assert r.verdict == Verdict.PASSED and r.speedup is not None, r.summary
    assert r.credit is not None and r.credit.speedup == 0 and r.performance_points == 0, \
        (r.summary, r.credit)


def test_a_runner_without_nodes_does_not_grade_it(tmp_path: Path) -> None:
    a = package.load(two_node_package(tmp_path))
    settings = get_settings().model_copy(update={"standin_nodes": 0})
    r = grader.grade(a, package.code_of(a, "reference"), settings=settings)
    assert r.verdict == Verdict.PLATFORM_ERROR
    assert "2 nodes" in r.summary and not r.tests
    # The runner hands it back as the platform's failure: the server grades it again, uncharged.
    from runners.fleet import runner

    outcome = runner.outcome_of(r)
    assert outcome.report is None and outcome.platform_error == r.summary
    assert runner.outcome_of(r.model_copy(update={"verdict": Verdict.FAILED})).report is not None


KILLED_RUNNER = """
import sys
from pathlib import Path
from runners import package
from runners.nodes import hardware
from runners.runs import configure
from runners.sandbox import create_executor
from runners.runs.session import Session
from runners.settings import get_settings
from runners.runs.stage import Stage
a = package.load(Path(sys.argv[1]))
settings = get_settings()
stage = Stage(scratch=settings.scratch_dir)
code = stage.add_code("submission", {"solution.py": sys.argv[2].encode()})
cfg = configure.make_config(a, executor=create_executor(settings, "bwrap"), stage=stage,
                            code_dir=code, cpus=hardware.host_cpus(), workers=2, gpu_mode="none",
                            settings=settings)
s = Session(cfg)
s.start()
print("started", flush=True)
s.call("hold", 600)
"""


def _ours(marker: str) -> list[int]:
    """Processes whose command line mentions `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


@pytest.mark.slow
def test_a_killed_runner_leaves_nothing_after_the_sweep(two_nodes: tuple) -> None:
    a, _ = two_nodes
    scratch = Path(tempfile.mkdtemp(prefix="paragrade-killed-"))
    scratch.chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PARAGRADE_STANDIN_NODES": "2",
           "PARAGRADE_SCRATCH_DIR": str(scratch)}
    runner = subprocess.Popen([sys.executable, "-c", KILLED_RUNNER, str(a.root), PROBE],
                              stdout=subprocess.PIPE, env=env)
    assert runner.stdout is not None and runner.stdout.readline() == b"started\n"
    time.sleep(0.5)
    mine = f"{overlay.RUN_PREFIX}{runner.pid}-"
    assert len([e for e in overlay.NETNS_DIR.iterdir() if e.name.startswith(mine)]) == 2
    assert _ours(str(scratch))  # its sandboxes run
    runner.send_signal(signal.SIGKILL)
    runner.wait()
    deadline = time.monotonic() + 10
    while _ours(str(scratch)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _ours(str(scratch)) == []  # every node's sandbox died with its runner
    # What a runner's start removes: the run's namespaces (their devices and firewall with
    # them) and both nodes' empty run cgroups.
    assert overlay.sweep() >= 2
    assert not [e for e in overlay.NETNS_DIR.iterdir() if e.name.startswith(mine)]
    assert cgroups.sweep(older_than_s=0) >= 2
    shutil.rmtree(scratch, ignore_errors=True)


@pytest.mark.slow
def test_through_the_server_on_a_gang_of_stand_in_nodes(nodes: list[overlay.Node],
                                                        tmp_path: Path) -> None:
    """The shipped t2-cluster: upload of the course's own script and program → the mpinodes
    queue → a runner holding two stand-in nodes → report → board."""
    from tests.server.live import Platform, wait_until

    course = tmp_path / "assignments" / "mn"
    course.mkdir(parents=True)
    shutil.copytree(SEED_FORM, course / "t2-cluster")
    p = Platform(tmp_path, f"sqla+sqlite:///{tmp_path / 'broker.sqlite'}",
                 assignments_dir=tmp_path / "assignments")
    try:
        code = p.course("mn/t2-cluster")
        ada = p.student("ada", code)
        p.start_runner("gang-1", "mpinodes", env={"PARAGRADE_STANDIN_NODES": "2"})
        wait_until("the two-node package to validate", lambda: p.get(
            p.prof, "/api/courses/c/assignments/t2-cluster")["validation"] == "ready", 300)
        [runner] = p.get(p.prof, "/api/fleet")["runners"]
        assert runner["queues"] == ["mpinodes"]
        program = (SEED_FORM / "reference" / "task2.py").read_bytes()
        r = p.http.post("/api/courses/c/assignments/t2-cluster/submissions", headers=ada,
                        files=[("files", ("job.sh", COURSES_SCRIPT.encode())),
                               ("files", ("task2.py", program))])
        assert r.status_code == 201, r.text
        sid = int(r.json()["id"])

        def graded() -> dict | None:  # type: ignore[type-arg]
            s = p.get(ada, f"/api/submissions/{sid}")
            return s if s["status"] not in ("queued", "running") else None

        g = wait_until("the two-node grade", graded, 300)
        assert (g["status"], g["verdict"], g["queue"]) == ("graded", "passed", "mpinodes"), g
        report = g["report"]
        assert [n.split(":")[0] for n in report["environment"]["nodes"]] == ["n1", "n2"]
        assert [s["nodes"] for s in report["scaling"]] == [2]
        # Each rank does half the baseline's work: the work ratio counts both nodes' CPU time
        # (waiting ranks spin on top of it: no upper bound).
        cpu = report["scaling"][-1]["cpu"]
        assert cpu is not None and cpu["work_ratio"] > 0.75, cpu
        notes = " ".join(report["notes"])
        assert "ran task2.py as 2 MPI ranks on 2 nodes" in notes
        assert "--partition=booster" in notes and "parallelism not measured" not in notes
        assert report["credit"]["status"] == "credited", report["credit"]
        board = p.get(ada, "/api/courses/c/assignments/t2-cluster/leaderboard")
        assert [(e["alias"], e["rank"], e["submission_id"]) for e in board] == [("ada", 1, sid)]
    finally:
        p.close()


@pytest.fixture(scope="module")
def slurm_two_nodes(nodes: list[overlay.Node]) -> Iterator[Path]:
    """A SLURM cluster of two nodes on this host (one slurmd each, standing on the stand-in
    hosts), with the shipped prolog and epilog; the folder it and the tests share."""
    from tests.slurm_cluster import SlurmCluster, missing

    why = missing()
    if why:
        pytest.skip(why)
    shared = Path(tempfile.mkdtemp(prefix="paragrade-slurm2-"))
    shared.chmod(0o755)
    cluster = SlurmCluster(shared / "cluster", nodes=2).start()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SLURM_CONF", str(cluster.conf))
        yield shared
    cluster.stop()
    shutil.rmtree(shared, ignore_errors=True)


def _job_networks() -> list[str]:
    return sorted(e.name for e in overlay.NETNS_DIR.iterdir()
                  if e.name.startswith(overlay.JOB_PREFIX))


@pytest.mark.slurm
@pytest.mark.slow
def test_two_nodes_through_one_slurm_allocation(slurm_two_nodes: Path) -> None:
    from runners.nodes import slurm

    pkg = slurm_two_nodes / "pkg"
    pkg.mkdir()
    a = package.load(two_node_package(pkg))
    scratch = slurm_two_nodes / "scratch"
    scratch.mkdir()
    settings = RunnerSettings(backend="slurm", scratch_dir=scratch, standin_nodes=2)
    r = slurm.grade(a, package.code_of(a, "reference"), settings=settings, time_limit_s=600)
    assert r.verdict == Verdict.PASSED, (r.summary, [t.message for t in r.tests])
    assert [n.split(":")[0] for n in r.environment.nodes] == ["n1", "n2"]
    assert all("SLURM job" in n for n in r.environment.nodes)
    assert [p.nodes for p in r.scaling] == [1, 2]
    # The baseline was placed over the cores the ranks took on both nodes, though the engine's
    # own step is bound to one of them (runners/runs/configure.local_cores).
    placed = [n for n in r.notes if n.startswith("the baseline was timed on each of cores")]
    assert len(placed) == 1 and placed[0].count(",") >= 1, r.notes  # two cores or more
    top = r.scaling[-1].cpu
    assert top is not None and top.work_ratio > 0.75  # node 2's CPU time came over its step
    # The seed's own form: its batch script's ranks on both nodes of the allocation.
    seed = package.load(SEED_FORM)
    r = slurm.grade(seed, package.code_of(seed, "reference"), settings=settings,
                    time_limit_s=600, with_timing=False)
    assert r.verdict == Verdict.PASSED, (r.summary, [t.message for t in r.tests])
    assert [n.split(":")[0] for n in r.environment.nodes] == ["n1", "n2"]
    # Anyone else's job on two nodes gets no overlay from the prolog.
    other = subprocess.run(["salloc", "--nodes=2", "--job-name=someone-else", "--quiet", "srun",
                            "--nodes=2", "--ntasks=2", "ip", "netns", "list"],
                           capture_output=True, text=True, timeout=120)
    assert other.returncode == 0 and overlay.JOB_PREFIX not in other.stdout, other
    deadline = time.monotonic() + 20  # the epilog runs once the job has ended
    while _job_networks() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _job_networks() == []


@pytest.mark.slow
@pytest.mark.parametrize("entry", ["calls", "batch script"])
def test_ranks_on_two_nodes_are_anchored_to_the_reference_beside_them(
        two_nodes: tuple, entry: str) -> None:
    """With a stored reference figure, the reference's ranks take the same two nodes in the same
    turns as the submission's: a function entry's two gangs alive at once, each frozen while the
    other is timed; a batch script's reference run as the reference's own script says."""
    called, settings = two_nodes
    a = called if entry == "calls" else package.load(SEED_FORM)
    on = settings.model_copy(update={"anchor": True})
    r = grader.grade(a, package.code_of(a, "reference"), settings=on, reference_speedup=1.6)
    assert r.verdict == Verdict.PASSED, (r.summary, r.notes)
    anchored_to_itself(r, 1.6)
    assert [n.split(":")[0] for n in r.environment.nodes] == ["n1", "n2"]
    assert overlay.leftovers() == []
