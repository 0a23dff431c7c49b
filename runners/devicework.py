"""What a timed call did on the GPU, read by the trusted side around the call (real GPUs only).

CPU time cannot tell a GPU task answered on the CPU from GPU work: a copy to the device keeps a
core busy too. The driver can. Through NVML (its management library, `nvidia-ml-py`) the grader
reads, outside the sandbox and out of the submission's reach:

- which processes hold a context on the GPU, and whether any of them is the sandbox's, with the
  device memory it holds (sampled every `POLL_S` during the call);
- how many bytes the GPU's PCIe link moved during the call, two ways: the driver's cumulative
  byte counters (`NVML_FI_DEV_PCIE_COUNT_TX_BYTES` / `_RX_BYTES`) where the GPU has them, and its
  throughput samples (each the link's rate over 20 ms) summed over the call. The larger counts:
  a counter the driver updates lazily can read 0 for a call that moved its input.

Every GPU of the node is watched (the sandbox sees them all). A GPU runner grades one submission
at a time and timing runs one side at a time, so the links' traffic during a call is that call's.
Both directions count: an answer that brings its input to the device is GPU work whichever way the
driver names the direction.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

POLL_S = 0.005
"""How often the sandbox's processes on the GPU are listed during a call."""
FIELD_TX, FIELD_RX = 197, 198
"""NVML_FI_DEV_PCIE_COUNT_TX_BYTES / _RX_BYTES: bytes over the PCIe link since the driver loaded."""


@dataclass
class DeviceCall:
    """One timed call, as the GPU saw it."""

    on_gpu: bool = False
    """A process of the sandbox held a context on the GPU during the call."""
    counted_bytes: float | None = None
    """Bytes the GPU's PCIe link moved during the call, both ways, by the driver's counters
    (None: the GPU has none)."""
    sampled_bytes: float | None = None
    """The same from the link's throughput samples (None: the GPU cannot say)."""
    memory_bytes: int | None = None
    """The most device memory a process of the sandbox held (None: the driver did not say)."""

    @property
    def moved_bytes(self) -> float | None:
        """What the link moved, by whichever reading says more (None: neither could be read)."""
        got = [b for b in (self.counted_bytes, self.sampled_bytes) if b is not None]
        return max(got) if got else None


def input_bytes(kwargs: dict[str, Any]) -> int:
    """Bytes of a call's array arguments (what a GPU answer has to bring to the device)."""
    return sum(v.nbytes for v in kwargs.values() if isinstance(v, np.ndarray))


class Watch:
    """NVML on the node's GPUs, opened for a grading; `call()` watches one timed call."""

    def __init__(self, nvml: ModuleType) -> None:
        self._nvml = nvml
        self._handles = [nvml.nvmlDeviceGetHandleByIndex(i)
                         for i in range(nvml.nvmlDeviceGetCount())]
        self._sampling = self._throughput() is not None
        ways = [w for w, ok in (("byte counters", self._counters() is not None),
                                ("throughput samples", self._sampling)) if ok]
        self.counter = " and ".join(ways) or "not readable on this GPU"
        """How the link's bytes are read."""
        self._own = set(self._gpu_pids())  # the runner's own contexts, if any

    def _counters(self) -> int | None:
        """Bytes the links moved since the driver loaded, both ways (None: no such counters)."""
        total = 0
        for handle in self._handles:
            try:
                values = self._nvml.nvmlDeviceGetFieldValues(handle, [FIELD_TX, FIELD_RX])
            except self._nvml.NVMLError:
                return None
            if any(v.nvmlReturn != 0 for v in values):
                return None
            total += sum(int(v.value.ullVal) for v in values)
        return total

    def _throughput(self) -> float | None:
        """Bytes per second over the links' last 20 ms, both ways (each read blocks that long);
        None where no GPU can say."""
        kb, said = 0, False
        for handle in self._handles:
            for way in (self._nvml.NVML_PCIE_UTIL_TX_BYTES, self._nvml.NVML_PCIE_UTIL_RX_BYTES):
                with contextlib.suppress(self._nvml.NVMLError):
                    kb += self._nvml.nvmlDeviceGetPcieThroughput(handle, way)
                    said = True
        return kb * 1024.0 if said else None

    def _gpu_pids(self) -> dict[int, int | None]:
        """Processes with a compute context on a GPU, with their device memory in bytes."""
        found: dict[int, int | None] = {}
        for handle in self._handles:
            with contextlib.suppress(self._nvml.NVMLError):
                for p in self._nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                    memory = p.usedGpuMemory if isinstance(p.usedGpuMemory, int) else None
                    found[p.pid] = memory if found.get(p.pid) is None else found[p.pid]
        return found

    @contextlib.contextmanager
    def call(self, pids: Callable[[], set[int] | None]) -> Iterator[DeviceCall]:
        """Watch one call of a sandbox whose processes `pids()` lists (None: it cannot tell, and
        then any process on the GPU but the runner's own counts as the sandbox's)."""
        seen = DeviceCall()
        stop = threading.Event()
        moved = [0.0]
        counted = self._counters()

        looked: set[int] = set()  # processes on the GPU already checked against the sandbox's
        mine: set[int] = set()

        def watch_processes() -> None:
            while True:
                found = {p: m for p, m in self._gpu_pids().items() if p not in self._own}
                if not looked.issuperset(found):  # the sandbox's processes, listed only then
                    ours = pids()
                    mine.update(p for p in found if ours is None or p in ours)
                    looked.update(found)
                for pid, memory in found.items():
                    if pid not in mine:
                        continue
                    seen.on_gpu = True
                    if memory is not None:
                        seen.memory_bytes = max(seen.memory_bytes or 0, memory)
                if stop.wait(POLL_S):
                    return

        def sample_link() -> None:
            while not stop.is_set():
                t0 = time.monotonic()
                rate = self._throughput() or 0.0
                moved[0] += rate * (time.monotonic() - t0)  # each rate stands for the loop's time

        threads = [threading.Thread(target=watch_processes, daemon=True)]
        if self._sampling:
            threads.append(threading.Thread(target=sample_link, daemon=True))
        for t in threads:
            t.start()
        try:
            yield seen
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=1.0)
            after = self._counters()
            if counted is not None and after is not None:
                seen.counted_bytes = float(max(0, after - counted))
            seen.sampled_bytes = moved[0] if self._sampling else None

    def close(self) -> None:
        with contextlib.suppress(self._nvml.NVMLError):
            self._nvml.nvmlShutdown()


def open_watch() -> tuple[Watch | None, str | None]:
    """NVML on the node's GPUs; (None, why) where it cannot be read (no driver, nvidia-ml-py)."""
    try:
        import pynvml as nvml
    except ImportError:
        return None, "nvidia-ml-py is not installed on this runner"
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        return None, f"NVML could not start ({exc})"
    try:
        return Watch(nvml), None
    except nvml.NVMLError as exc:
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()
        return None, f"NVML could not read the GPUs ({exc})"

