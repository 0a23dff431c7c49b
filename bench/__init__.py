"""Benchmarks (docs/contributors/benchmarks.md), each run as `python -m bench.NAME`.

A bench stops what it started (clusters, scalers, pilots, servers) in its `finally` blocks when
SIGINT interrupts it, as the suite does with one past its time (tests/test_benches.py). A
process started in the background by a shell without job control inherits SIGINT *ignored*,
and Python then never raises KeyboardInterrupt: such a bench ran on to its end (measured in a
fresh clone's CI started that way). So SIGINT is made to interrupt here, whatever the parent.
"""

import signal
import threading

if threading.current_thread() is threading.main_thread():
    signal.signal(signal.SIGINT, signal.default_int_handler)
