"""Evidence of GPU work (runners/measure/devicework.py) and the GPU credit rule that uses it.

No GPU here: the driver's library is stood in for by `FakeNvml`, a test double named so, which
answers the NVML calls the watch makes. The same watch ran against a real H200's driver
(docs/gpu-validation.md)."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from runners.measure import credit, devicework, stats
from runners.protocol import DeviceWork, Parallelism, ScalingPoint, SpeedupFigure
from runners.sandbox import cgroups
from runners.sandbox.base import Limits, host_prefix
from tests.conftest import SessionFactory

MIB = 2**20


class NVMLError(Exception):
    pass


@dataclass
class FakeNvml:
    """Test double for the NVIDIA driver's management library (pynvml), one GPU."""

    counters: int | None = 10 * MIB  # None: the GPU has no PCIe byte counters
    rate_kb_s: int | None = 0  # None: no throughput samples either
    processes: dict[int, int] = field(default_factory=dict)  # pid -> device memory
    NVMLError: type[Exception] = NVMLError
    NVML_PCIE_UTIL_TX_BYTES: int = 0
    NVML_PCIE_UTIL_RX_BYTES: int = 1

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return f"gpu{index}"

    def nvmlDeviceGetFieldValues(self, handle: str, ids: list[int]) -> list[Any]:
        assert ids == [devicework.FIELD_TX, devicework.FIELD_RX]
        ok = self.counters is not None
        value = SimpleNamespace(ullVal=self.counters or 0)
        return [SimpleNamespace(nvmlReturn=0 if ok else 3, value=value),
                SimpleNamespace(nvmlReturn=0 if ok else 3, value=SimpleNamespace(ullVal=0))]

    def nvmlDeviceGetPcieThroughput(self, handle: str, way: int) -> int:
        if self.rate_kb_s is None:
            raise NVMLError("Not Supported")
        time.sleep(0.02)
        return self.rate_kb_s if way == self.NVML_PCIE_UTIL_RX_BYTES else 0

    def nvmlDeviceGetComputeRunningProcesses(self, handle: str) -> list[Any]:
        return [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in dict(self.processes).items()]

    def nvmlShutdown(self) -> None:
        pass


def watch_a_call(nvml: FakeNvml, pids: set[int] | None, during: Any) -> devicework.DeviceCall:
    watch = devicework.Watch(nvml)  # type: ignore[arg-type]
    with watch.call(lambda: pids) as seen:
        during(nvml)
        time.sleep(0.05)  # the watch lists processes every few milliseconds
    return seen


def test_a_call_that_copies_its_input_to_the_gpu_is_seen_there() -> None:
    def copy(nvml: FakeNvml) -> None:
        nvml.processes[4242] = 600 * MIB  # the sandbox's worker opens a context
        nvml.counters = (nvml.counters or 0) + 512 * MIB  # and copies 512 MiB to the device

    seen = watch_a_call(FakeNvml(rate_kb_s=10), {4242, 4243}, copy)
    assert seen.on_gpu and seen.memory_bytes == 600 * MIB
    assert seen.counted_bytes == 512 * MIB and seen.moved_bytes == 512 * MIB
    assert seen.sampled_bytes is None  # the counters decide where the GPU has them


def test_contexts_of_other_processes_are_not_the_sandboxs() -> None:
    def elsewhere(nvml: FakeNvml) -> None:
        nvml.processes[5000] = MIB  # a process outside the sandbox

    seen = watch_a_call(FakeNvml(processes={77: MIB}), {4242}, elsewhere)
    assert seen.on_gpu is False and seen.memory_bytes is None
    # A runner that cannot list the sandbox's processes (in another pid namespace): a context is not
    # measured rather than guessed to be the sandbox's, or not.
    assert watch_a_call(FakeNvml(), None, lambda n: None).on_gpu is False  # none at all
    assert watch_a_call(FakeNvml(), None, elsewhere).on_gpu is None


def test_a_context_held_since_the_warm_up_shows_even_in_a_short_call() -> None:
    nvml = FakeNvml(processes={4242: 600 * MIB})  # opened by the untimed first call
    watch = devicework.Watch(nvml)  # type: ignore[arg-type]
    with watch.call(lambda: {4242}) as seen:
        pass  # shorter than one poll
    assert seen.on_gpu is True and seen.memory_bytes == 600 * MIB


def test_a_reading_that_fails_leaves_the_call_unmeasured() -> None:
    def broken() -> set[int]:
        raise RuntimeError("the cgroup went away")

    nvml = FakeNvml(processes={4242: MIB})
    with devicework.Watch(nvml).call(broken) as seen:  # type: ignore[arg-type]
        time.sleep(0.05)
    assert seen.on_gpu is None and seen.moved_bytes is None

    class NoListing(FakeNvml):
        def nvmlDeviceGetComputeRunningProcesses(self, handle: str) -> list[Any]:
            raise NVMLError("Not Supported")  # a MIG slice, say

    with devicework.Watch(NoListing()).call(lambda: {4242}) as seen:  # type: ignore[arg-type]
        pass
    assert seen.on_gpu is None


def test_without_byte_counters_the_throughput_samples_add_up() -> None:
    nvml = FakeNvml(counters=None, rate_kb_s=10 * 2**20)  # 10 GiB/s into the GPU
    watch = devicework.Watch(nvml)  # type: ignore[arg-type]
    assert watch.counter == "throughput samples"
    with watch.call(lambda: set()) as seen:
        time.sleep(0.2)
    assert seen.counted_bytes is None and seen.sampled_bytes is not None
    assert seen.moved_bytes == seen.sampled_bytes
    assert 1.0 * 2**30 < seen.sampled_bytes < 4.0 * 2**30  # ≈ 0.2 s × 10 GiB/s
    blind = devicework.Watch(FakeNvml(counters=None, rate_kb_s=None))  # type: ignore[arg-type]
    assert blind.counter == "not readable on this GPU"
    with blind.call(lambda: set()) as seen:
        pass
    assert seen.moved_bytes is None


def test_open_watch_says_why_without_a_driver() -> None:
    watch, why = devicework.open_watch()
    assert watch is None and why is not None, why  # no GPU on this machine
    assert "NVML could not start" in why or "nvidia-ml-py is not installed" in why, why


def test_input_bytes_count_the_arrays() -> None:
    assert devicework.input_bytes({"values": np.zeros(1024), "threads_per_block": 256}) == 8192


def test_the_sandbox_lists_its_processes_as_the_host_numbers_them(
        make_session: SessionFactory) -> None:
    s = make_session("def f():\n    return 1\n", backend="bwrap")
    s.call("f")
    pids = s.pids()
    assert pids, pids
    commands = [Path(f"/proc/{p}/cmdline").read_bytes() for p in pids if os.path.exists(f"/proc/{p}")]
    assert any(b"worker.py" in c for c in commands), commands


# The credit rule -------------------------------------------------------------------------------

def _gpu_decide(speedup: float, device: DeviceWork | None, reference: float = 2.0) -> Any:
    fig = SpeedupFigure(median=speedup, ci_low=speedup * 0.9, ci_high=speedup * 1.1,
                        baseline_median_s=0.1, submission_median_s=0.1 / speedup, repetitions=9)
    point = ScalingPoint(workers=1, speedup=speedup, efficiency=speedup, ci_low=fig.ci_low,
                         ci_high=fig.ci_high, submission_median_s=0.1 / speedup, device=device)
    return credit.decide(policy="parallel", figure=fig, point=point, cores=1,
                         reference_speedup=reference, reference_factor=3.0, gpu=True)


def _device(on_gpu: int | None, moved: float | None, calls: int = 9) -> DeviceWork:
    return DeviceWork(calls=calls, on_gpu_calls=on_gpu, moved_bytes=moved, input_bytes=512 * MIB,
                      counter="byte counters")


def test_a_gpu_task_answered_on_the_cpu_earns_no_performance_points() -> None:
    cpu_only = _gpu_decide(2.1, _device(0, 0.0))
    assert cpu_only.status == "refused" and cpu_only.speedup == 0.0
    assert "9 of your 9 timed calls ran with none of your processes on the GPU" in cpu_only.reason
    token = _gpu_decide(2.1, _device(9, 2 * MIB))  # a context, but the sum done on the CPU
    assert token.status == "refused"
    assert "moved 2.0 MiB over the GPU's link per call, for an input of 512.0 MiB" in token.reason
    real = _gpu_decide(2.1, _device(9, 513 * MIB))
    assert real.status == "credited" and real.speedup == 2.1
    # Where the link cannot be read, a context in every call is what the driver can witness.
    assert _gpu_decide(2.1, _device(9, None)).status == "credited"
    assert _gpu_decide(2.1, None).status == "credited"  # no NVML: the reference bound alone
    # A runner that cannot tell its sandbox's processes: the bytes alone decide.
    assert _gpu_decide(2.1, _device(None, 513 * MIB)).status == "credited"
    assert _gpu_decide(2.1, _device(None, 0.0)).status == "refused"
    assert _gpu_decide(9.0, _device(9, 513 * MIB)).status == "held"  # over 3× the reference


def test_a_gpu_task_timed_on_more_cores_than_it_grants_is_held() -> None:
    """Where no cpuset confines the sandbox, a submission can widen its own affinity and sum on
    every core of the node behind a token context (t3 3.0.0: about 1× a core, so 16 cores would
    reach its curve). The grader reads the busy cores from outside: beyond the grant, held."""
    def with_cores(busy: float, low: float, cores: int = 1) -> Any:
        fig = SpeedupFigure(median=14.0, ci_low=12.0, ci_high=16.0, baseline_median_s=0.2,
                            submission_median_s=0.2 / 14, repetitions=9)
        cpu = Parallelism(parallelism=busy, parallelism_ci_low=low, parallelism_ci_high=busy * 1.1,
                          baseline_parallelism=1.0, work_ratio=1.0, work_ratio_ci_low=0.9,
                          work_ratio_ci_high=1.1, submission_cpu_median_s=0.2 * busy / 14,
                          baseline_cpu_median_s=0.2)
        point = ScalingPoint(workers=1, speedup=14.0, efficiency=14.0, ci_low=12.0, ci_high=16.0,
                             submission_median_s=0.2 / 14, cpu=cpu, device=_device(9, None))
        return credit.decide(policy="parallel", figure=fig, point=point, cores=cores,
                             reference_speedup=120.0, reference_factor=3.0, gpu=True)

    wide = with_cores(15.2, 14.8)
    assert wide.status == "held" and wide.speedup == 0.0
    assert "kept 15.2 busy cores, more than the 1 this task grants" in wide.reason, wide.reason
    assert with_cores(0.97, 0.95).status == "credited"  # the reference's own figure on the H100
    assert with_cores(2.0, 1.98, cores=2).status == "credited"  # t4's two ranks on their two


def test_device_work_summarises_the_calls_that_counted() -> None:
    s = stats.Samples(1, baseline=[0.1] * 3, submission=[0.04] * 3)
    s.submission_device = [devicework.DeviceCall(on_gpu=True, counted_bytes=b, memory_bytes=m)
                           for b, m in ((500 * MIB, MIB), (512 * MIB, 3 * MIB), (0.0, 2 * MIB))]
    s.baseline_device = [devicework.DeviceCall(counted_bytes=4096.0)] * 3
    s.input_bytes = [512 * MIB] * 3
    s.device_counter = "byte counters"
    work = stats.device_work(s)
    assert work is not None
    assert work.moved_bytes == 500 * MIB and work.baseline_moved_bytes == 4096.0
    assert work.on_gpu_calls == 3 and work.memory_bytes == 3 * MIB and work.input_bytes == 512 * MIB
    assert stats.device_work(stats.Samples(1)) is None
    s.submission_device[1] = devicework.DeviceCall(on_gpu=None)  # one call not measured
    work = stats.device_work(s)
    assert work is not None and work.on_gpu_calls is None and work.moved_bytes is None


def test_the_watch_threads_end_with_the_call() -> None:
    before = threading.active_count()
    watch_a_call(FakeNvml(rate_kb_s=1), set(), lambda n: None)
    assert threading.active_count() == before
    watch = devicework.Watch(FakeNvml())  # type: ignore[arg-type]
    with pytest.raises(RuntimeError), watch.call(lambda: set()):  # a call that raises still
        raise RuntimeError("the call failed")  # stops the watch
    assert threading.active_count() == before


def test_without_a_memory_cgroup_a_gpu_run_caps_its_data_not_its_address_space() -> None:
    # A CUDA context reserves address space it never touches: under an address-space cap, an
    # H200's t3 sandbox could not map its 512 MiB input (ENOMEM).
    bare = cgroups.RunCgroup()  # no memory controller
    gpu = host_prefix(Limits(cpus=(0,), memory_mb=1024, gpus=1), bare, drop_to_uid=None)
    cpu = host_prefix(Limits(cpus=(0,), memory_mb=1024), bare, drop_to_uid=None)
    assert f"--data={4 << 30}" in gpu and not any(a.startswith("--as=") for a in gpu)
    assert f"--as={4 << 30}" in cpu and not any(a.startswith("--data=") for a in cpu)
