"""Starts an MPI program whose ranks span nodes, from the leader node's sandbox.

`python -I -B mpilaunch.py --hosts n1:2,n2:2 --ranks 4 -- PROGRAM…` runs MPICH's `mpiexec` with
its manual launcher: mpiexec prints one proxy command per node and waits for them to connect.
This script starts the leader's own proxy (proxy 0); the runner starts the others in the other
nodes' sandboxes from a template of the same command. The script runs inside the sandbox, next to
the submission: nothing it does is trusted, and a submission that breaks it only breaks its own
run. Its exit status is mpiexec's.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys

LAUNCH = "HYDRA_LAUNCH:"
LAUNCH_END = "HYDRA_LAUNCH_END"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", required=True)
    parser.add_argument("--ranks", type=int, required=True)
    parser.add_argument("program", nargs=argparse.REMAINDER)
    opts = parser.parse_args(argv)
    program = opts.program[1:] if opts.program[:1] == ["--"] else opts.program
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    cmd = [mpiexec, "-launcher", "manual", "-hosts", opts.hosts, "-n", str(opts.ranks), *program]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, bufsize=0)
    assert proc.stdout is not None
    proxy: subprocess.Popen[bytes] | None = None
    proxy_cmd: list[str] | None = None
    out = proc.stdout.fileno()
    while proxy is None:
        chunk = proc.stdout.readline()
        if not chunk:
            break
        line = chunk.decode(errors="replace").strip()
        if line.startswith(LAUNCH):
            if line.endswith("--proxy-id 0"):
                proxy_cmd = shlex.split(line[len(LAUNCH):])
        elif line == LAUNCH_END:
            if proxy_cmd is None:
                break
            proxy = subprocess.Popen(proxy_cmd)
        else:
            os.write(1, chunk)
    while chunk := os.read(out, 65536):
        os.write(1, chunk)
    code = proc.wait()
    if proxy is not None and proxy.poll() is None:
        # mpiexec has delivered every rank's output and status: its proxy has nothing left to
        # do (after a failed rank it may linger for seconds).
        proxy.kill()
        proxy.wait()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
