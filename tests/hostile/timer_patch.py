"""Attack: make every clock in the process lie, so any in-process timer reports ~0 s."""
import time

_fake = [1e9]


def _lying_clock(*_a):
    _fake[0] += 1e-9
    return _fake[0]


for name in ("perf_counter", "monotonic", "time", "process_time"):
    setattr(time, name, _lying_clock)
for name in ("perf_counter_ns", "monotonic_ns", "time_ns"):
    setattr(time, name, lambda: int(_lying_clock() * 1e9))


def total(n, workers=1):
    return sum(i * 0.001 for i in range(n))
