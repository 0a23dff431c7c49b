"""What an idle node's cores spin at, kept across processes: the per-host calibration the capacity
probe compares every grading with, and the kernel's own CPU pressure.

A probe that learns each core's best from its own recent past learns busy where the node is busy
from the start (a fresh `paragrade grade`, a runner started at a deadline). The kernel's run
delay (runners/measure/capacity.py) says what other processes take; what it cannot see is a core
the host slows apart from the others. So a runner, while its node is idle, spins every core the
way the probe does (all at once, at the sandboxes' priority) and stores each core's
BEST_QUANTILE rate with its state (`paragrade runner calibrate`, and at the runner's start where
the node is quiet: runners.measure.capacity.calibrate); every probe's best is at least that. A
calibration is made only where the kernel says nothing waited: the spinners' own run delay
(/proc/self/schedstat) under QUIET_WAITING in most probes, and the node's CPU pressure
(/proc/pressure/cpu, `some` over the last 10 s) under QUIET_PRESSURE.
"""

from __future__ import annotations

import contextlib
import os
import socket
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from runners.protocol.jobs import BUSY_PRESSURE

QUIET_WAITING = 0.05
"""A spin whose process waited runnable for more than this share of its time met another
process on its core: its rate is not the core's. An idle core here lets a 20 ms spin wait 0–2 %
(one spinner beside it, on two cores: 1 %; three: 51 %)."""
QUIET_PRESSURE = BUSY_PRESSURE
"""CPU pressure (`some avg10`, in %) under which the node counts as idle for a calibration."""
CALIBRATION_S = 3.0
"""A calibration spins this long in all: enough probes for a quantile, short enough for a start."""
QUIET_SHARE = 0.8
"""A calibration is kept only where this share of its probes waited for nothing."""


def pressure() -> float | None:
    """The node's CPU pressure: the share of the last 10 s in which some runnable task waited
    for a CPU, in % (None: the kernel does not say: no PSI)."""
    try:
        text = Path("/proc/pressure/cpu").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("some "):
            fields = dict(f.split("=", 1) for f in line.split()[1:] if "=" in f)
            with contextlib.suppress(KeyError, ValueError):
                return float(fields["avg10"])
    return None


class Calibration(BaseModel):
    """An idle node's cores, as the capacity probe spins them, stored with the runner's state."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = Field(description="The host it was made on: another host's cores are not these")
    made_at: str = Field(description="When, ISO 8601 in UTC")
    rates: dict[int, float] = Field(description="Each core's rate (iterations a second) spinning "
                                    "with the others at once, at the probes' quantile")
    pressure: float | None = Field(default=None, description="CPU pressure when it was made (%)")
    probes: int = Field(ge=1)

    def best(self, cpu: int) -> float | None:
        return self.rates.get(cpu)

    def age_s(self) -> float | None:
        """Seconds since it was made (None: a time it cannot have been made at, in the future
        or unreadable)."""
        try:
            made = datetime.fromisoformat(self.made_at)
        except ValueError:
            return None
        if made.tzinfo is None:
            return None
        age = (datetime.now(UTC) - made).total_seconds()
        return age if age >= 0 else None


class NodeBusy(Exception):
    """The node is not idle: a calibration made now would store busy as the node's best."""


def load(path: Path) -> Calibration | None:
    """This host's stored calibration (None: none, another host's, or unreadable)."""
    try:
        cal = Calibration.model_validate_json(path.read_bytes())
    except (OSError, ValidationError, ValueError):
        return None
    return cal if cal.host == socket.gethostname() else None


def store(cal: Calibration, path: Path) -> Calibration:
    """Write `cal` to `path` whole (a reader never sees half a file); cores the stored one
    calibrated and `cal` did not keep their rates. Returns what was stored."""
    if (old := load(path)) is not None:
        cal = cal.model_copy(update={"rates": {**old.rates, **cal.rates}})
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(cal.model_dump_json(indent=1))
    tmp.replace(path)
    return cal


def summary(cal: Calibration) -> str:
    """One line on a calibration, for the operator."""
    each = ", ".join(f"core {c} {r / 1e6:.1f} M/s" for c, r in sorted(cal.rates.items()))
    spread = (max(cal.rates.values()) / min(cal.rates.values()) - 1) if cal.rates else 0.0
    at = f", CPU pressure {cal.pressure:.1f} %" if cal.pressure is not None else ""
    return (f"calibrated {len(cal.rates)} cores on {cal.host} at {cal.made_at} from "
            f"{cal.probes} quiet probes ({each}; fastest {spread:.0%} above the slowest{at})")
