"""Prometheus metrics of the server.

One server process keeps them in its own registry. `paragrade serve --workers N` runs N processes
with PROMETHEUS_MULTIPROC_DIR set (prometheus_client's multiprocess mode: each process writes its
values to files there), and a scrape, whichever process answers it, adds up every process's.
The queue depth is no process's value: it is read from the database at each scrape.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

MULTIPROCESS = "PROMETHEUS_MULTIPROC_DIR" in os.environ  # read by prometheus_client at import too
if MULTIPROCESS:  # it writes there from the first metric on
    Path(os.environ["PROMETHEUS_MULTIPROC_DIR"]).mkdir(parents=True, exist_ok=True)

REGISTRY = CollectorRegistry()
REQUESTS = Counter("paragrade_http_requests_total", "HTTP requests", ["method", "route", "status"],
                   registry=REGISTRY)
GRADING_LATENCY = Histogram("paragrade_grading_latency_seconds",
                            "Submission to graded, seconds", registry=REGISTRY,
                            buckets=(1, 5, 10, 30, 60, 120, 300, 600, 1800))


def _process_metrics() -> Iterable[Metric]:
    if not MULTIPROCESS:
        return REGISTRY.collect()
    every_process: Collector = MultiProcessCollector(None)  # type: ignore[no-untyped-call]
    return every_process.collect()


class _Scrape:
    """What one scrape reports: the server's metrics and the queue depth it was given."""

    def __init__(self, queue_depth: Mapping[str, int], running: Mapping[str, int]) -> None:
        self.queue_depth, self.running = queue_depth, running

    def collect(self) -> Iterable[Metric]:
        yield from _process_metrics()
        depth = GaugeMetricFamily("paragrade_queue_depth", "Queued grading jobs", labels=["queue"])
        for queue, n in sorted(self.queue_depth.items()):
            depth.add_metric([queue], n)
        yield depth
        # With the queued ones, what a fleet that follows the queue scales on (a runner busy
        # with a job holds its message unacknowledged: a broker list's length misses it).
        running = GaugeMetricFamily("paragrade_jobs_running", "Jobs a runner is grading",
                                    labels=["queue"])
        for queue, n in sorted(self.running.items()):
            running.add_metric([queue], n)
        yield running


def exposition(queue_depth: Mapping[str, int], running: Mapping[str, int] | None = None) -> bytes:
    """The text exposition of a scrape."""
    return generate_latest(_Scrape(queue_depth, running or {}))
