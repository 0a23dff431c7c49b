"""Probes run in one sandbox session each: what can a submission see, reach or keep?"""
import os
import socket


def find_secrets_on_disk():
    """Walk the visible file system for anything of the grader's."""
    wanted = {"test_hidden.py", "assignment.toml", "shadow", "pytest_plugin.py", "context.json"}
    found = []
    for root, dirs, files in os.walk("/"):
        # /usr and the runtime are the public system (bound read-only), not the grader's files.
        dirs[:] = [d for d in dirs if root != "/" or d not in ("proc", "sys", "dev", "usr")]
        if root == "/opt/paragrade":
            dirs[:] = [d for d in dirs if d != "runtime"]
        found += [os.path.join(root, f) for f in files if f in wanted]
    for path in ("/work/main/assignments", "/root", "/etc/shadow", "/home"):
        if os.path.exists(path) and os.access(path, os.R_OK):
            found.append(path)
    return found


def connect_local_services(ports):
    """TCP to the host's loopback services and to a public address."""
    reached = []
    for host in ("127.0.0.1", "::1", "10.0.2.2", "1.1.1.1"):
        for port in ports:
            try:
                socket.create_connection((host, port), timeout=1).close()
                reached.append(f"{host}:{port}")
            except OSError:
                pass
    return reached


def environment():
    return dict(os.environ)


def plant(marker):
    """Leave files where a later run might find them."""
    planted = []
    for d in ("/tmp", os.environ.get("HOME", "/tmp"), os.getcwd(), "/dev/shm"):
        try:
            with open(os.path.join(d, "cache.txt"), "w") as fh:
                fh.write(marker)
            planted.append(d)
        except OSError:
            pass
    return planted


def harvest():
    found = []
    for d in ("/tmp", os.environ.get("HOME", "/tmp"), os.getcwd(), "/dev/shm"):
        path = os.path.join(d, "cache.txt")
        if os.path.exists(path):
            found.append(path)
    return found


def write_outside():
    """Try to modify the system, the runtime and the submission itself."""
    done = []
    for path in ("/usr/evil", "/opt/paragrade/runtime/evil", "/sub/solution.py", "/etc/evil"):
        try:
            with open(path, "a") as fh:
                fh.write("x")
            done.append(path)
        except OSError:
            pass
    return done


def other_processes():
    """Command lines of every process visible from the sandbox."""
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    out.append(fh.read().replace(b"\0", b" ").decode(errors="replace"))
            except OSError:
                pass
    return out


def fork_bomb():
    while True:
        try:
            os.fork()
        except OSError:
            pass


def memory_bomb():
    hog = []
    while True:
        hog.append(bytearray(64 * 1024 * 1024))


def output_flood():
    import sys

    chunk = "x" * (1 << 20)
    for _ in range(10 * 1024):  # 10 GB
        sys.stdout.write(chunk)


def disk_flood():
    with open("big.bin", "wb") as fh:
        for _ in range(10 * 1024):
            fh.write(b"\0" * (1 << 20))


def pid_namespace():
    return os.readlink("/proc/self/ns/pid")
