"""t4's CUDA kernel, checked without a GPU: its source compiled for CPU threads (a GPU stand-in).

CuPy has no simulator, so t4's reference cannot run here. Its kernel is a C string, though:
compiled by g++ with a few definitions (`__syncthreads` a barrier of the block's threads, shared
memory one static array, blocks run one after another), the same source makes and sums the
values, and NumPy (hidden/timing.py) checks the sums. nvcc, where present, compiles it for a real
GPU architecture as NVRTC would. What only a GPU shows (CuPy's launch, MPI of device buffers,
speed) is in docs/gpu-validation.md.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import shutil
import subprocess
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from runners.settings import get_settings
from tests.conftest import COURSE

T4 = COURSE / "t4-cuda-mpi"

# The GPU stand-in: CUDA's names for a kernel of one dimension, on std::thread.
_PRELUDE = r"""
#include <barrier>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>
struct Dim { unsigned int x; };
static thread_local Dim threadIdx;
static Dim blockIdx, blockDim, gridDim;
static std::barrier<>* block_barrier;
#define __global__
#define __device__
#define __shared__ static
#define __syncthreads() block_barrier->arrive_and_wait()
static unsigned long long atomicAdd(unsigned long long* p, unsigned long long v)
{
    return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
"""

_DRIVER = r"""
int main(int argc, char** argv)
{
    gridDim.x = (unsigned)atoi(argv[1]);
    blockDim.x = (unsigned)atoi(argv[2]);
    long long lo, hi, a, c, m;
    while (scanf("%lld %lld %lld %lld %lld", &lo, &hi, &a, &c, &m) == 5) {
        unsigned long long out = 0;
        for (unsigned b = 0; b < gridDim.x; ++b) {
            blockIdx.x = b;
            std::barrier<> barrier(blockDim.x);
            block_barrier = &barrier;
            std::vector<std::thread> threads;
            for (unsigned t = 0; t < blockDim.x; ++t) {
                threads.emplace_back([&, t] { threadIdx.x = t; range_sum(lo, hi, a, c, m, &out); });
            }
            for (auto& thread : threads) thread.join();
        }
        printf("%lld\n", (long long)out);
    }
    return 0;
}
"""


def _constants(path: Path) -> dict[str, object]:
    """The module's top-level constants, read without importing it (it imports CuPy)."""
    found: dict[str, object] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            with contextlib.suppress(ValueError):  # not a literal: KERNEL_SRC is VALUE_SRC + one
                found[node.targets[0].id] = ast.literal_eval(node.value)
    return found


def _kernel_source() -> str:
    """The reference's KERNEL_SRC, which is VALUE_SRC followed by the kernel."""
    tree = ast.parse((T4 / "reference" / "solution.py").read_text())
    consts = _constants(T4 / "reference" / "solution.py")
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "KERNEL_SRC":
            assert isinstance(node.value, ast.BinOp)
            left, right = node.value.left, node.value.right
            assert isinstance(left, ast.Name) and isinstance(right, ast.Constant)
            return str(consts[left.id]) + str(right.value)
    raise AssertionError("the reference has no KERNEL_SRC")


def _timing() -> ModuleType:
    spec = importlib.util.spec_from_file_location("t4_timing", T4 / "hidden" / "timing.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _range_expected(lo: int, hi: int, a: int, c: int, m: int) -> int:
    return int(_timing().values(np.arange(lo, hi, dtype=np.int64), a, c, m).sum())


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("g++") is None:
        pytest.skip("no g++ on this machine")
    folder = tmp_path_factory.mktemp("t4-kernel")
    (folder / "kernel.cpp").write_text(_PRELUDE + _kernel_source() + _DRIVER)
    subprocess.run(["g++", "-std=c++20", "-O1", "-pthread", "-o", str(folder / "kernel"),
                    str(folder / "kernel.cpp")], check=True, capture_output=True, text=True)
    return folder / "kernel"


def test_the_starter_gives_the_references_value() -> None:
    """The `value` students are given is the one the reference (and so the grader) makes."""
    starter = _constants(T4 / "starter" / "solution.py")["VALUE_SRC"]
    assert starter == _constants(T4 / "reference" / "solution.py")["VALUE_SRC"]
    assert "__device__ long long value(" in str(starter)


def test_the_kernel_sums_every_range_exactly(stand_in: Path) -> None:
    """Ranges of every shape: empty, one value, fewer than the grid's threads, many strides, the
    ranks' halves of an odd count, and the extreme parameters of the hidden tests."""
    rng = np.random.default_rng(4)
    m_max = 2**31
    n = 200_001
    half = -(-n // 2)
    cases = [(0, 0, 3, 1, 1000), (7, 7, 3, 1, 1000), (0, 10, 3, 1, 1000), (5, 6, 48271, 11, 2**31 - 1),
             (0, 500, 5, 2, 97), (0, half, 48271, 11, m_max - 1), (half, n, 48271, 11, m_max - 1),
             (0, 30_000, 0, 0, 1), (0, 30_000, 0, 12345, m_max),
             (1_000_000, 1_050_000, m_max - 1, m_max - 1, m_max)]
    for _ in range(4):
        m = int(rng.integers(2**30, m_max + 1))
        lo = int(rng.integers(0, 2**27 - 100_000))
        cases.append((lo, lo + int(rng.integers(1, 100_000)), int(rng.integers(0, m)),
                      int(rng.integers(0, m)), m))
    lines = "".join(f"{' '.join(map(str, c))}\n" for c in cases)
    got = subprocess.run([str(stand_in), "3", "256"], input=lines, check=True,
                         capture_output=True, text=True, timeout=120).stdout.split()
    assert [int(g) for g in got] == [_range_expected(*c) for c in cases]
    assert int(got[2]) == 4172  # the statement's ten values (the public test)


def test_the_kernel_compiles_for_a_gpu(tmp_path: Path) -> None:
    """nvcc (where this machine has it) compiles the source for an H100 as NVRTC will."""
    if shutil.which("nvcc") is None:
        pytest.skip("no nvcc on this machine")
    (tmp_path / "kernel.cu").write_text(_kernel_source())
    done = subprocess.run(["nvcc", "-ptx", "-arch=sm_90", "-o", str(tmp_path / "kernel.ptx"),
                           str(tmp_path / "kernel.cu")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert ".entry range_sum(" in (tmp_path / "kernel.ptx").read_text()


def test_the_baseline_makes_the_same_values() -> None:
    """The serial baseline (numba on the CPU, in the sandbox's runtime) sums what the grader checks."""
    python = get_settings().runtime_dir / "bin" / "python"
    rng = np.random.default_rng(5)
    cases = [(0, 3, 1, 1000), (10, 3, 1, 1000), (1, 0, 7, 2**31)]
    for _ in range(3):
        m = int(rng.integers(2**30, 2**31 + 1))
        cases.append((int(rng.integers(1, 300_000)), int(rng.integers(0, m)), int(rng.integers(0, m)), m))
    code = ("import importlib.util, sys\n"
            "spec = importlib.util.spec_from_file_location('baseline', sys.argv[1])\n"
            "b = importlib.util.module_from_spec(spec); spec.loader.exec_module(b)\n"
            "for line in sys.stdin: print(b.gpu_mpi_sum(*map(int, line.split())))\n")
    got = subprocess.run([str(python), "-c", code, str(T4 / "baseline" / "solution.py")],
                         input="".join(f"{' '.join(map(str, c))}\n" for c in cases),
                         check=True, capture_output=True, text=True, timeout=120).stdout.split()
    assert [int(g) for g in got] == [_timing().expected(*c) for c in cases]
    assert got[1] == "4172"
