"""What a timed call did on the GPU, read by the trusted side around the call (real GPUs only).

CPU time cannot tell a GPU task answered on the CPU from GPU work: a copy to the device keeps a
core busy too. The driver can. Through NVML (its management library, `nvidia-ml-py`) the grader
reads, outside the sandbox and out of the submission's reach:

- which processes hold a context on the GPU, and whether any of them is the sandbox's, with the
  device memory it holds (listed before the call, every `POLL_S` during it and after it). The
  sandbox's processes are those its backend lists as the host numbers them (its cgroup, or its
  process tree; a container's cgroup where the runner sees it); where they cannot be listed
  (a runner in another pid namespace than its containers), the call is "not measured";
- how many bytes the GPU's PCIe link moved during the call: the driver's cumulative byte
  counters (`NVML_FI_DEV_PCIE_COUNT_TX_BYTES` / `_RX_BYTES`), read just before and just after
  the call, where the GPU has them (an H200 has; they move at once), else its throughput samples
  (each the link's rate over 20 ms) summed over the call.

What it does not see: what the processes did on the GPU. A context, or bytes moved, is
necessary evidence of GPU work, not proof of it: a CPU answer that opens a context and moves a
few bytes for show passes where the input is not an array (docs/gpu-validation.md). A reading
that fails leaves the call "not measured", never refused.

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

POLL_S = 0.02
"""How often the sandbox's processes on the GPU are listed during a call (and once before and
once after it): a context, once open, stays open until its process ends."""
FIELD_TX, FIELD_RX = 197, 198
"""NVML_FI_DEV_PCIE_COUNT_TX_BYTES / _RX_BYTES: bytes over the PCIe link since the driver loaded."""


@dataclass
class DeviceCall:
    """One timed call, as the GPU saw it."""

    on_gpu: bool | None = False
    """A process of the sandbox held a context on the GPU during the call (None: not
    measurable: the backend cannot list the sandbox's processes, or a reading failed)."""
    counted_bytes: float | None = None
    """Bytes the GPU's PCIe link moved during the call, both ways, by the driver's counters
    (None: the GPU has none)."""
    sampled_bytes: float | None = None
    """The same from the link's throughput samples, where the GPU has no counters (None: not
    read)."""
    memory_bytes: int | None = None
    """The most device memory a process of the sandbox held (None: the driver did not say)."""

    @property
    def moved_bytes(self) -> float | None:
        """What the link moved: the counters where the GPU has them, else the samples."""
        return self.counted_bytes if self.counted_bytes is not None else self.sampled_bytes


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
        """Processes with a compute context on a GPU, with their device memory in bytes (an
        NVML error propagates: the call is then not measured)."""
        found: dict[int, int | None] = {}
        for handle in self._handles:
            for p in self._nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                memory = p.usedGpuMemory if isinstance(p.usedGpuMemory, int) else None
                found[p.pid] = memory if found.get(p.pid) is None else found[p.pid]
        return found

    @contextlib.contextmanager
    def call(self, pids: Callable[[], set[int] | None]) -> Iterator[DeviceCall]:
        """Watch one call of a sandbox whose processes (as the host numbers them) `pids()` lists.
        Where it cannot (None), or where a reading fails, the call's context is "not measured"
        rather than guessed."""
        seen = DeviceCall()
        stop = threading.Event()
        broken: list[BaseException] = []
        moved = [0.0]
        looked: set[int] = set()  # processes on the GPU already checked against the sandbox's
        mine: set[int] = set()
        blind = [False]

        def look() -> None:
            found = self._gpu_pids()
            if not looked.issuperset(found):  # the sandbox's processes, listed only then
                ours = pids()
                blind[0] = blind[0] or ours is None
                mine.update(p for p in found if ours is not None and p in ours)
                looked.update(found)
            for pid, memory in found.items():
                if pid in mine:
                    seen.on_gpu = True
                    if memory is not None:
                        seen.memory_bytes = max(seen.memory_bytes or 0, memory)

        def guarded(loop: Callable[[], None]) -> Callable[[], None]:
            def run() -> None:
                try:
                    loop()
                except Exception as exc:  # an unmeasured call, never a refused one
                    broken.append(exc)
            return run

        def watch_processes() -> None:
            while not stop.wait(POLL_S):
                look()

        def sample_link() -> None:
            while not stop.is_set():
                t0 = time.monotonic()
                rate = self._throughput() or 0.0
                moved[0] += rate * (time.monotonic() - t0)  # each rate stands for the loop's time

        counted = self._counters()
        guarded(look)()  # a context held since the warm-up call shows at once
        threads = [threading.Thread(target=guarded(watch_processes), daemon=True)]
        if counted is None and self._sampling:
            threads.append(threading.Thread(target=guarded(sample_link), daemon=True))
        for t in threads:
            t.start()
        try:
            yield seen
        finally:
            after = self._counters() if counted is not None else None  # at once: nothing later
            stop.set()
            for t in threads:
                t.join(timeout=1.0)
            guarded(look)()  # and a last look once the call is over
            if counted is not None and after is not None:
                seen.counted_bytes = float(max(0, after - counted))
            elif counted is None and self._sampling:
                seen.sampled_bytes = moved[0]
            if broken or blind[0] or any(t.is_alive() for t in threads):
                seen.on_gpu = None
                seen.counted_bytes = seen.sampled_bytes = None

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

