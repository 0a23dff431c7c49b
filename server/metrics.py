"""Prometheus metrics of the server (one registry per process)."""

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry()
REQUESTS = Counter("paragrade_http_requests_total", "HTTP requests", ["method", "route", "status"],
                   registry=REGISTRY)
QUEUE_DEPTH = Gauge("paragrade_queue_depth", "Queued grading jobs", ["queue"], registry=REGISTRY)
GRADING_LATENCY = Histogram("paragrade_grading_latency_seconds",
                            "Submission to graded, seconds", registry=REGISTRY,
                            buckets=(1, 5, 10, 30, 60, 120, 300, 600, 1800))
