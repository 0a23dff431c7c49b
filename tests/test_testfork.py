"""The test processes' fork server (runners.grading.testfork): each run a fresh process with the caller's
environment, never a credential, killed with its children past its time, started again when
gone, gone with its caller."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runners.grading import testfork, testrun

PROBE = '''
import json, os, sys
from pathlib import Path

import runners.settings

def test_probe():
    seen = getattr(runners.settings, "touched_by_an_earlier_run", False)
    runners.settings.touched_by_an_earlier_run = True
    Path(os.environ["PROBE_OUT"]).write_text(json.dumps({
        "pid": os.getpid(), "cwd": os.getcwd(), "mark": os.environ.get("PROBE_MARK"),
        "seen": seen, "environ": Path("/proc/self/environ").read_bytes().decode(errors="replace"),
        "pytest_preloaded": "pytest" in sys.modules}))
    print("the probe ran")

def test_fails():
    assert os.environ.get("PROBE_FAIL") != "1"
'''

SLEEPER = '''
import os, subprocess, time
from pathlib import Path

def test_sleeps():
    child = subprocess.Popen(["sleep", "300"])
    Path(os.environ["PROBE_OUT"]).write_text(str(child.pid))
    time.sleep(300)
'''


def _request(tmp_path: Path, test: str, **env: str) -> tuple[testfork.Request, Path]:
    (tmp_path / "test_it.py").write_text(test)
    out = tmp_path / "probe.json"
    run_env = {**testrun._test_env(), "PROBE_OUT": str(out), **env}
    return testfork.Request(argv=["-q", "-p", "no:cacheprovider", str(tmp_path / "test_it.py")],
                            cwd=str(tmp_path), env=run_env,
                            output=str(tmp_path / "output.txt")), out


def _server_pid() -> int:
    testrun.prepare()
    proc = testfork._SERVER._proc
    assert proc is not None
    return proc.pid


def test_each_run_is_a_fresh_process_with_the_callers_environment(tmp_path: Path) -> None:
    seen = []
    for mark, fail in (("first", "0"), ("second", "1")):
        request, out = _request(tmp_path, PROBE, PROBE_MARK=mark, PROBE_FAIL=fail)
        ended = testfork.run(request, 60, testrun.PRELOAD)
        assert ended == testfork.Ended(exit_code=int(fail)), Path(request.output).read_text()
        assert "the probe ran" not in Path(request.output).read_text()  # pytest captured it
        assert ("1 failed" if fail == "1" else "2 passed") in Path(request.output).read_text()
        seen.append(json.loads(out.read_text()))
    first, second = seen
    assert (first["mark"], second["mark"]) == ("first", "second")
    assert first["pid"] != second["pid"] != os.getpid()
    assert not second["seen"], "a module changed by one run was seen by the next"
    assert first["cwd"] == second["cwd"] == str(tmp_path)
    assert first["pytest_preloaded"]


def test_no_credential_reaches_the_server_or_a_run(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    testfork._SERVER.close()
    token = "runner-token-never-for-tests"
    monkeypatch.setenv("PARAGRADE_RUNNER_TOKEN", token)
    monkeypatch.setenv("PARAGRADE_BROKER_URL", f"redis://:{token}@127.0.0.1:6379/0")
    pid = _server_pid()  # started now, from this environment
    assert token not in Path(f"/proc/{pid}/environ").read_text(errors="replace")
    request, out = _request(tmp_path, PROBE)
    assert testfork.run(request, 60, testrun.PRELOAD).exit_code == 0
    assert token not in out.read_text()  # neither os.environ nor /proc/self/environ


def _gone(pid: int) -> bool:
    for _ in range(50):  # the kill is sent; the process goes a moment later
        if not Path(f"/proc/{pid}").exists() or \
                Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
            return True
        time.sleep(0.1)
    return False


def test_a_run_past_its_time_is_killed_with_its_children(tmp_path: Path) -> None:
    request, out = _request(tmp_path, SLEEPER)
    start = time.monotonic()
    ended = testfork.run(request, 5, testrun.PRELOAD)
    assert ended == testfork.Ended(exit_code=None, timed_out=True)
    assert time.monotonic() - start < 30  # a pathology bound: 5 s asked
    assert _gone(int(out.read_text())), "the run's child outlived the run's time"


class Cancelled(Exception):
    pass


def test_a_wait_interrupted_kills_the_run_with_its_children(tmp_path: Path) -> None:
    """A cancelled job interrupts the grading from a signal handler (runners.fleet.claimed.lease)."""
    request, out = _request(tmp_path, SLEEPER)

    def cancel(_signum: int, _frame: object) -> None:
        raise Cancelled

    previous = signal.signal(signal.SIGALRM, cancel)
    signal.setitimer(signal.ITIMER_REAL, 4)
    try:
        with pytest.raises(Cancelled):
            testfork.run(request, 60, testrun.PRELOAD)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert _gone(int(out.read_text())), "the run's child outlived its cancelled wait"


def test_a_server_that_has_gone_is_started_again(tmp_path: Path) -> None:
    old = _server_pid()
    os.kill(old, signal.SIGKILL)
    request, _ = _request(tmp_path, PROBE)
    assert testfork.run(request, 60, testrun.PRELOAD).exit_code == 0
    assert _server_pid() != old


def test_the_server_ends_with_its_caller(tmp_path: Path) -> None:
    caller = subprocess.run(
        [sys.executable, "-c", "import os, sys\nfrom runners.grading import testfork, testrun\n"
         "testrun.prepare()\nprint(testfork._SERVER._proc.pid, testfork._SERVER._dir)\n"
         "sys.stdout.flush()\nos._exit(0)  # no atexit: as if killed"],
        capture_output=True, text=True, timeout=60, check=True)
    pid, folder = caller.stdout.split()
    for _ in range(100):
        if not Path(f"/proc/{pid}").exists():
            break
        time.sleep(0.1)
    else:
        pytest.fail("the fork server outlived the process that started it")
    assert not Path(folder).exists()


def test_a_fork_of_the_caller_leaves_the_callers_server_alone(tmp_path: Path) -> None:
    """Celery's pool child is a fork of the runner: it starts a server of its own."""
    server = _server_pid()
    child = os.fork()
    if child == 0:  # the fork forgets the server it did not start, and stops nothing of it
        testfork._SERVER.close()
        os._exit(0 if testfork._SERVER._proc is None else 1)
    assert os.waitpid(child, 0)[1] == 0
    request, _ = _request(tmp_path, PROBE)
    assert testfork.run(request, 60, testrun.PRELOAD).exit_code == 0
    assert _server_pid() == server


def test_a_server_that_cannot_start_says_why() -> None:
    server = testfork.ForkServer()
    try:
        with pytest.raises(OSError, match=r"did not start: (.|\n)*No module named 'no_such_preload'"):
            server.ensure(dict(os.environ), ("no_such_preload",))
        assert server._dir is None  # nothing left behind
    finally:
        server.close()


DRAWS = '''
import os, random
import numpy as np

def test_draws():
    with open(os.environ["PROBE_OUT"], "a") as out:
        out.write(f"{np.random.randint(2**31)} {random.getrandbits(31)}\\n")
'''


def test_each_run_draws_its_own_random_numbers(tmp_path: Path) -> None:
    """A hidden test that draws from a global generator gets new inputs in every grading, even
    from a generator the server imported before it forked the run."""
    server = testfork.ForkServer()
    try:
        for _ in range(2):
            request, out = _request(tmp_path, DRAWS)
            assert server.run(request, 60, (*testrun.PRELOAD, "numpy.random")).exit_code == 0
    finally:
        server.close()
    first, second = out.read_text().splitlines()
    assert first.split()[0] != second.split()[0], "numpy's draws repeat from run to run"
    assert first.split()[1] != second.split()[1], "random's draws repeat from run to run"


def test_a_pid_said_after_the_deadline_is_still_read() -> None:
    """The run's child said its pid only after the caller's wait timed out: the caller still
    reads it (to kill that child), though its file object reads nothing after a time-out."""
    caller, server = socket.socketpair()
    with caller, server:
        reader = caller.makefile("rb")
        caller.settimeout(0.01)
        with pytest.raises(TimeoutError):
            reader.readline()
        server.sendall(json.dumps({"pid": 4321}).encode() + b"\n")
        assert testfork._late_pid(caller) == 4321
        reader.close()


def test_a_preload_that_prints_does_not_break_the_start(tmp_path: Path) -> None:
    (tmp_path / "noisy_preload.py").write_text('print("a notice on stdout")\n')
    server = testfork.ForkServer()
    try:
        server.ensure({**testrun._test_env(), "PYTHONPATH": str(tmp_path)}, ("noisy_preload",))
        request, out = _request(tmp_path, PROBE)
        assert server.run(request, 60, ("noisy_preload",)).exit_code == 0
        assert json.loads(out.read_text())["cwd"] == str(tmp_path)
    finally:
        server.close()
