"""The broker both ends share: the queues by capability, the one task, priorities, transport
options."""

from __future__ import annotations

from typing import Literal

QUEUES = ("cpu", "mpi", "gpu", "mpinodes", "gpusim")
Queue = Literal["cpu", "mpi", "gpu", "mpinodes", "gpusim"]
"""mpinodes: MPI jobs whose ranks span several nodes, served by runners that hold a gang;
gpusim: GPU tasks that can be simulated, graded for correctness under numba's CUDA simulator by
a runner without a GPU while no GPU runner is live (the server moves them: services/fleet/routing.py)."""
TASK_NAME = "paragrade.run_job"
"""The one Celery task: its only argument is a job id; the runner claims the job over HTTP."""
LOWEST_PRIORITY = 9
"""Broker priorities run 0 (first) to 9 (last); regrade-all uses the last."""


def broker_options(url: str, key_prefix: str = "") -> dict[str, object]:
    """Celery transport options both ends of the broker must agree on.

    Redis gets ten priority lists (0 served first) and an optional key prefix that keeps several
    deployments (or test runs) apart on one Redis. The embedded SQLite broker has neither.
    """
    if not url.startswith(("redis://", "rediss://")):
        return {}
    options: dict[str, object] = {"priority_steps": list(range(LOWEST_PRIORITY + 1)), "sep": ":",
                                  "queue_order_strategy": "priority"}
    if key_prefix:
        options["global_keyprefix"] = key_prefix
    return options
