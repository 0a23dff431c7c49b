"""Figure 1: sandbox start overhead vs a bare process (target ≤ 20 ms).

Runs `true` and `python -c pass` bare and through each backend's full start path (cgroup,
rlimits, affinity, user drop, namespaces) and prints medians.
Usage: .venv/bin/python -m bench.sandbox_overhead
"""

from __future__ import annotations

import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from bench.common import publish
from runners.sandbox import Limits, Mount, SandboxSpec, create_executor
from runners.settings import get_settings

N = 30


def bare(argv: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(argv, check=True)
    return time.perf_counter() - t


def sandboxed(backend: str, argv: list[str], work: Path) -> float:
    ex = create_executor(get_settings(), backend)
    spec = SandboxSpec(argv=argv, mounts=[], workdir=Mount(work, "/tmp/work", writable=True),
                       env={"PATH": "/usr/bin:/bin"}, limits=Limits(cpus=(0,), wall_s=30))
    t = time.perf_counter()
    info = ex.start(spec).wait()
    elapsed = time.perf_counter() - t
    assert info is not None and info.returncode == 0, info
    return elapsed


def main() -> None:
    python = str(get_settings().runtime_dir / "bin" / "python")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        work.chmod(0o777)
        for label, argv in (("true", ["/bin/true"]), ("python -c pass", [python, "-c", "pass"])):
            base = statistics.median(bare(argv) for _ in range(N))
            for backend in ("process", "bwrap"):
                med = statistics.median(sandboxed(backend, argv, work) for _ in range(N))
                rows.append({"program": label, "backend": backend, "bare_ms": base * 1e3,
                             "sandboxed_ms": med * 1e3, "overhead_ms": (med - base) * 1e3})
    publish("sandbox_overhead", rows, {
        "program": "program", "backend": "backend", "bare_ms": "bare (ms) %.1f",
        "sandboxed_ms": "sandboxed (ms) %.1f", "overhead_ms": "overhead (ms) %.1f"})

if __name__ == "__main__":
    main()
