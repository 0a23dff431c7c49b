"""On a GPU node: what the driver tells the trusted side (NVML), and where t3's speedup comes from.

1. NVML: which readings this GPU gives (PCIe byte counters, throughput samples, processes with
   their memory, per-process utilisation, GPM), and what runners.measure.devicework.Watch and two GPM
   samples read around a 512 MiB copy to the device from this process, around kernels that run
   0.3 s and 1 ms with no copy, and around a CPU-only sum, with how soon the byte counters move
   after a copy. GPM (Hopper and later) measures SM activity over exactly a window: the witness
   of kernel work the credit rule lacks where a task's input is not an array.
2. t3's timed call outside the platform, by the number of values: the baseline's compiled serial
   loop (median of 3 calls) and the reference's kernel (median of 7), which makes the values on
   the GPU.

Usage (on the node, repository root): python -m bench.gpu_probe [OUT.json]
Without a GPU it says so and measures the CPU rows only.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from runners.measure import devicework

ROOT = Path(__file__).resolve().parent.parent
T3 = ROOT / "assignments/treasure-hunt/t3-cuda"
SIZES = (2**24, 2**25, 2**26)


def _module(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _nvml_facts(nvml: Any) -> dict[str, Any]:
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    facts: dict[str, Any] = {}
    for name, call in {
        "name": lambda: nvml.nvmlDeviceGetName(h),
        "driver": nvml.nvmlSystemGetDriverVersion,
        "pcie_gen": lambda: nvml.nvmlDeviceGetCurrPcieLinkGeneration(h),
        "pcie_width": lambda: nvml.nvmlDeviceGetCurrPcieLinkWidth(h),
        "pcie_counters": lambda: [(v.nvmlReturn, int(v.value.ullVal)) for v in
                                  nvml.nvmlDeviceGetFieldValues(h, [devicework.FIELD_TX,
                                                                    devicework.FIELD_RX])],
        "pcie_throughput_kb_s": lambda: [nvml.nvmlDeviceGetPcieThroughput(h, w) for w in (0, 1)],
        "processes": lambda: [(p.pid, p.usedGpuMemory) for p in
                              nvml.nvmlDeviceGetComputeRunningProcesses(h)],
        "utilization": lambda: str(nvml.nvmlDeviceGetUtilizationRates(h)),
        "accounting_mode": lambda: nvml.nvmlDeviceGetAccountingMode(h),
        "gpm_supported": lambda: nvml.nvmlGpmQueryDeviceSupport(h).isSupportedDevice,
    }.items():
        try:
            facts[name] = call()
        except Exception as exc:  # what the GPU cannot answer is the finding
            facts[name] = f"error: {exc}"
    return facts


def _process_utilization(nvml: Any, since_us: int) -> Any:
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    try:
        return [(s.pid, s.smUtil, s.memUtil) for s in nvml.nvmlDeviceGetProcessUtilization(h, since_us)]
    except Exception as exc:
        return f"error: {exc}"


GPM_METRICS = {"sm_util": 2, "sm_occupancy": 3, "integer_util": 4, "dram_bw_util": 10}
"""NVML_GPM_METRIC_*: what the GPU's performance monitor (Hopper and later) says of a window."""


def _gpm(nvml: Any, what: Any) -> dict[str, Any]:
    """GPM metrics over exactly the window of `what()`: two samples around it (a witness of
    kernel work the grader could use where the input is not an array; not used yet)."""
    try:
        h = nvml.nvmlDeviceGetHandleByIndex(0)
        s1, s2 = nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc()
        nvml.nvmlGpmSampleGet(h, s1)
        t0 = time.perf_counter()
        what()
        took = time.perf_counter() - t0
        nvml.nvmlGpmSampleGet(h, s2)
        get = nvml.c_nvmlGpmMetricsGet_t()
        get.version = nvml.NVML_GPM_METRICS_GET_VERSION
        get.numMetrics = len(GPM_METRICS)
        get.sample1, get.sample2 = s1, s2
        for i, metric in enumerate(GPM_METRICS.values()):
            get.metrics[i].metricId = metric
        nvml.nvmlGpmMetricsGet(get)
        out: dict[str, Any] = {"seconds": round(took, 5)}
        for i, name in enumerate(GPM_METRICS):
            m = get.metrics[i]
            out[name] = round(m.value, 3) if m.nvmlReturn == 0 else f"error {m.nvmlReturn}"
        nvml.nvmlGpmSampleFree(s1)
        nvml.nvmlGpmSampleFree(s2)
        return out
    except Exception as exc:  # what the GPU cannot answer is the finding
        return {"error": str(exc)}


def _watched(watch: devicework.Watch, what: Any) -> dict[str, Any]:
    import pynvml as nvml

    t0 = time.perf_counter()
    gpm: dict[str, Any] = {}
    with watch.call(lambda: {os.getpid()}) as seen:
        gpm = _gpm(nvml, what)
        took = time.perf_counter() - t0
    return {"seconds": round(took, 4), "gpm": gpm, "on_gpu": seen.on_gpu,
            "counted_MiB": None if seen.counted_bytes is None else round(seen.counted_bytes / 2**20, 1),
            "sampled_MiB": None if seen.sampled_bytes is None else round(seen.sampled_bytes / 2**20, 1),
            "memory_MiB": None if seen.memory_bytes is None else round(seen.memory_bytes / 2**20, 1)}


def nvml_part(out: dict[str, Any]) -> None:
    watch, why = devicework.open_watch()  # before this process opens a CUDA context
    if watch is None:
        out["nvml"] = f"not readable: {why}"
        return
    import pynvml as nvml

    out["nvml"] = _nvml_facts(nvml)
    out["watch_counter"] = watch.counter
    import cupy as cp

    x = np.random.default_rng(1).random(2**26)
    rows = {"cpu_sum_no_context": _watched(watch, lambda: float(np.sum(x)))}
    keep: list[Any] = []

    def to_gpu() -> None:
        keep.append(cp.asarray(x))
        cp.cuda.Device().synchronize()

    rows["copy_512MiB_to_gpu"] = _watched(watch, to_gpu)
    rows["cpu_sum_with_context"] = _watched(watch, lambda: float(np.sum(x)))
    rows["copy_512MiB_to_host"] = _watched(watch, lambda: keep[0].get())
    since = int(time.time() * 1e6)

    def spin_kernel() -> None:
        y = keep[0]
        until = time.perf_counter() + 0.3
        while time.perf_counter() < until:
            y = y * 1.0000001
            cp.cuda.Device().synchronize()

    rows["kernel_0.3s_no_copy"] = _watched(watch, spin_kernel)
    rows["kernel_1ms"] = _watched(watch, lambda: (keep[0].sum(), cp.cuda.Device().synchronize()))
    out["process_utilization_after_kernel"] = _process_utilization(nvml, since)
    out["watched"] = rows
    # How soon the counters move after a copy: read at once, then later.
    lag: dict[str, Any] = {}
    before = watch._counters()
    cp.asarray(x)
    cp.cuda.Device().synchronize()
    for wait in (0.0, 0.05, 0.2, 1.0):
        time.sleep(wait)
        now = watch._counters()
        lag[f"after_{wait}s_MiB"] = None if now is None or before is None else round(
            (now - before) / 2**20, 1)
    out["counter_lag"] = lag
    watch.close()


def _median_ms(fn: Any, args: dict[str, Any], reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn(**args)
        times.append(time.perf_counter() - t0)
    return round(statistics.median(times) * 1e3, 3)


def t3_part(out: dict[str, Any], gpu: bool) -> None:
    """t3's timed call by n: the baseline's serial loop against the reference's kernel (the
    values made on the GPU), each answer checked against the closed form."""
    base = _module(T3 / "baseline/solution.py", "t3_baseline")
    hook = _module(T3 / "hidden/timing.py", "t3_timing")
    base.gpu_sum(16, 3, 1, 7)  # compile outside the timing
    ref = _module(T3 / "reference/solution.py", "t3_reference") if gpu else None
    if ref is not None:
        ref.gpu_sum(1024, 3, 1, 7, 256)
    rng = np.random.default_rng(3)
    rows = []
    for n in SIZES:
        args = hook.draw(rng, n)
        row: dict[str, Any] = {"values": n, "baseline_ms": _median_ms(base.gpu_sum, args, 3)}
        if ref is not None:
            assert ref.gpu_sum(**args, threads_per_block=256) == hook.expected(**args)
            row["reference_ms"] = _median_ms(ref.gpu_sum, {**args, "threads_per_block": 256}, 7)
            row["reference_speedup"] = round(row["baseline_ms"] / row["reference_ms"], 1)
            import pynvml as nvml  # one call's GPM window (the witness the rule could use)

            with contextlib.suppress(Exception):
                nvml.nvmlInit()
                row["reference_gpm"] = _gpm(nvml, functools.partial(
                    ref.gpu_sum, **args, threads_per_block=256))
                row["baseline_gpm"] = _gpm(nvml, functools.partial(base.gpu_sum, **args))
        rows.append(row)
        print(json.dumps(row), flush=True)
    out["t3_sizes"] = rows


def main() -> None:
    out: dict[str, Any] = {}
    gpu = Path("/dev/nvidia0").exists()
    if gpu:
        t = threading.Thread(target=nvml_part, args=(out,))
        t.start()
        t.join(timeout=120)
        print(json.dumps({k: out.get(k) for k in ("nvml", "watch_counter", "watched",
                                                    "process_utilization_after_kernel",
                                                    "counter_lag")}, indent=1, default=str),
              flush=True)
    else:
        print("no GPU on this node: the CPU rows only", flush=True)
    t3_part(out, gpu)
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
