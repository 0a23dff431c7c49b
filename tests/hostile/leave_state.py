"""Leaves state wherever a later test in the same sandbox could read it, and looks for it at import.

A zygote's child per test imports this file afresh: FOUND names what an earlier test left. `total`
answers right only when nothing was found, so a grading of it passes every test only if no test
saw another's state. `leave` says what it managed to leave, so a test can tell "nothing found"
from "nothing left".
"""
import ctypes
import os
import signal
import socket
import sys
import threading
import time

MARK = b"paragrade-was-here"
FILES = {"tmp": "/tmp/left.txt", "work": os.path.join(os.getcwd(), "left.txt"),
         "shm": "/dev/shm/left", "dev": "/dev/left", "tmp-dir": "/tmp/left-dir/locked/x"}
ABSTRACT = b"\0paragrade-left"
SHM_KEY = 0x5EED
RESULT = "/run/paragrade-result"
SYS_ADD_KEY, SYS_KEYCTL, KEYCTL_SEARCH, KEY_SPEC_USER_KEYRING = 248, 250, 10, -4
_libc = ctypes.CDLL(None, use_errno=True)


def _key(add: bool) -> bool:
    if os.uname().machine != "x86_64":
        return False
    if add:
        n = _libc.syscall(SYS_ADD_KEY, b"user", b"paragrade-left", MARK, len(MARK),
                          ctypes.c_long(KEY_SPEC_USER_KEYRING))
    else:
        n = _libc.syscall(SYS_KEYCTL, KEYCTL_SEARCH, ctypes.c_long(KEY_SPEC_USER_KEYRING),
                          b"user", b"paragrade-left", 0)
    return n > 0


def found_now():
    found = [name for name, path in FILES.items()
             if os.path.exists(path if name != "tmp-dir" else "/tmp/left-dir")]
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(ABSTRACT)
        s.close()
        found.append("process")
    except OSError:
        pass
    if _libc.shmget(SHM_KEY, 0, 0) >= 0:
        found.append("sysv-shm")
    if _key(add=False):
        found.append("keyring")
    numpy = sys.modules.get("numpy")
    if numpy is not None and hasattr(numpy, "_paragrade_left"):
        found.append("memory")
    try:
        with open(RESULT, "rb") as fh:
            if MARK in fh.read():
                found.append("result-file")
    except OSError:
        pass
    return found


FOUND = found_now()


def _daemon():
    """A process that outlives its test: double fork, own session, listening."""
    if os.fork():
        return
    os.setsid()
    if os.fork():
        os._exit(0)
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(ABSTRACT)
        s.listen(8)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while True:
            s.accept()[0].close()
    finally:
        os._exit(0)


def leave():
    """Leave state in every place; name those where it was left."""
    left = []
    for name, path in FILES.items():
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as fh:
                fh.write(MARK)
            left.append(name)
        except OSError:
            pass
    try:
        os.chmod("/tmp/left-dir/locked", 0)  # the zygote must still remove it
        os.chmod("/tmp/left-dir", 0o500)
    except OSError:
        pass
    _daemon()
    for _ in range(200):
        if "process" in found_now():
            left.append("process")
            break
        time.sleep(0.01)
    if _libc.shmget(SHM_KEY, 4096, 0o1000 | 0o600) >= 0:  # IPC_CREAT
        left.append("sysv-shm")
    if _key(add=True):
        left.append("keyring")
    import numpy

    numpy._paragrade_left = True
    left.append("memory")
    if os.access(RESULT, os.W_OK):
        # over and over: the harness empties the file when a call returns
        threading.Thread(target=_write_result, daemon=True).start()
        left.append("result-file")
    return left


def _write_result():
    while True:
        with open(RESULT, "r+b") as fh:
            fh.write(MARK)
        time.sleep(0.005)


def reach_parent():
    """What a test could do to the process it was forked from (the zygote)."""
    reached = []
    for what, mode in (("mem", "r+b"), ("environ", "rb"), ("fd/0", "rb")):
        try:
            with open(f"/proc/{os.getppid()}/{what}", mode):
                reached.append(what)
        except OSError:
            pass
    return reached


def me():
    return [os.getpid(), os.getppid()]


def signal_parent(signum):
    os.kill(os.getppid(), signum)
    return True


def total(n, workers=1):
    if FOUND:
        raise RuntimeError(f"state left by an earlier test: {FOUND}")
    leave()
    return sum(i * 0.001 for i in range(n))


def crash(code):
    print("bye from the crashing test", flush=True)
    os._exit(code)
