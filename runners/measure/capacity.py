"""What the node delivers of the allotted cores while a speedup is timed, and which timed windows
count.

A shared node takes cores away without saying so (on our VMs the steal counter stays 0), and the
loss is one-sided: it slows the parallel side, never a serial baseline on its one core. So the
trusted side measures the node itself between timed calls, where no submission code can run
(both sandboxes frozen, or no sandbox alive): every allotted core spins the same fixed loop at
once, and

    share_core = rate_core / best_core
    delivered  = Σ_cores min(1, share_core / min(1, max share), 1 − waiting_core)

Two signals, neither learnt from a busy past:
- **waiting**: the share of its spin the probe's process sat runnable on a run queue, as the
  kernel counts it (/proc/self/schedstat). With the submission frozen or gone, that is other
  work on the core (the server of a one-machine start, a neighbour), whatever the probe
  remembers; a submission that starts more workers than its cores waits in its own calls, never
  in a probe. A probe that waited is not remembered as the core's best.
- **share**: each core's rate against its best, the BEST_QUANTILE of its quiet rates over the
  last MEMORY_S (this process's probes: a runner's across its gradings) and never below the
  host's idle calibration (runners/measure/calibration.py: kept across processes, so a fresh
  `paragrade grade` on a node slowed since its start still sees it), as a share of the fastest
  core's: a host that slows every core alike (ours do, for minutes, unseen) slows both sides of
  the ratio alike, while a core slowed apart slows the parallel side alone.

And a third, inside the window itself: the serial baseline's own run delay in its timed calls
(its sandbox's threads' schedstat, read from outside around each call, the other side frozen or
gone). A probe woken beside a steady neighbour is sometimes let run alone (the scheduler credits
a sleeper), so its waiting can read 1 % beside four spinners; a baseline call that runs for
tenths of a second meets them whole. A window counts no more cores than the baseline's waiting
left (Windows.keep).

Cores that spin together are a little slower each than one alone (turbo, shared caches: 0.8–0.95
here); that is the node, not a tenant, so each core is compared with itself under the same load.
The probes run at the sandboxes' priority, so they meet what the sandbox would meet (and not a
low-priority process that only soaks up idle time). A window (one A/B pair of timed calls, or
one block) counts unless both probes around it found the node short (under SHORT_SHARE of the
allotted cores: a single probe's blip is jitter, a lasting loss shows in both); otherwise its
calls are timed again. After RETIME_FACTOR × the timing budget, windows count whatever the
probes say (the node did not come back), and the figure says the node was busy; so does a
figure most of whose windows found the node short (UNRELIABLE_SHARE), whole windows between them
or not. Such a figure earns no performance points where the runner waits for a free node (its
default): runners/grading/grader.py. A submission cannot choose which of its calls are dropped:
the probes run while it is frozen or gone.
"""

from __future__ import annotations

import contextlib
import os
import socket
import statistics
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime

from runners.measure import calibration
from runners.measure.calibration import QUIET_WAITING, Calibration, pressure
from runners.protocol import Interference

SHORT_SHARE = 0.9
"""A window whose node delivered less than this share of the allotted cores is re-timed: on an
idle node a 20 ms probe reads 0.84–1.0 of its best, and the better of two probes ≥ 0.9; a core
taken away reads ≤ 0.75 in both."""
BEST_QUANTILE = 0.9
"""A core's best is this quantile of its recent rates: the fastest single spin is an outlier (a
turbo burst), against which every later probe would look short."""
MEMORY_S = 900.0
"""How long a core's best spin stands: a node that stays slower for longer is the node as it now
is, not a passing tenant."""
RETIME_FACTOR = 2.0
"""Re-timing stops once timing has spent this many times its budget: a node that stays short
that long is reported as such rather than waited for."""
UNRELIABLE_SHARE = 0.5
"""A figure more than this share of whose windows (re-timed ones included) found the node short
was measured under interference: the report says so. That covers a node that did not come back
(most counted windows kept short) and one short in most windows though the windows that count
probed whole: where cores come and go within a second (host SMT siblings, measured on our VMs), a
20 ms probe that reads whole between short ones says little of the window beside it, a slowed
core may have slowed either side, and a probe woken beside a same-priority tenant is sometimes
let run alone (the scheduler's credit to sleepers). Quiet gradings here find at most 27 % of
their windows short."""
PROBE_S = 0.02
"""One probe spins about this long on each core: long enough to span a few scheduler slices."""

_SPIN = """
import os, sys, time
def sched():
    try:
        with open("/proc/self/schedstat") as f:
            ran, waited = f.read().split()[:2]
        return int(ran), int(waited)
    except (OSError, ValueError):
        return None
try:
    for line in sys.stdin:
        n = int(line)
        s0 = sched()
        t0 = time.perf_counter()
        x = 0
        for i in range(n):
            x += i
        t = time.perf_counter() - t0
        s1 = sched()
        if s0 is None or s1 is None:
            print(t, -1, -1, flush=True)
        else:
            print(t, s1[0] - s0[0], s1[1] - s0[1], flush=True)
except BrokenPipeError:  # the probe's process went (a runner stopped mid-spin): nobody to tell
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
"""


MEMORY_PROBES = 2000
"""At most this many probes are remembered per set of cores (a busy runner probes about twice a
second): the quantile then sorts a bounded list between timed calls."""
_RATES: dict[tuple[int, ...], deque[tuple[float, list[float]]]] = {}
"""Recent probes' spin rates per core (iterations a second), by the set of cores that spun."""


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[round(q * (len(ordered) - 1))]


class CapacityProbe:
    """One trusted spinner process per allotted core, each pinned to its core."""

    def __init__(self, cpus: list[int], *, calibration: Calibration | None = None) -> None:
        self.cpus = list(cpus)
        self.calibration = calibration
        """The host's idle cores (runners/measure/calibration.py): every core's best is at least
        its calibrated rate, so a node busy since this process started still reads busy."""
        self.speeds: dict[int, float] = {}
        """Each core's speed in the last probe, as a share of the set's fastest core's best."""
        self.waiting = 0.0
        """The largest share of its spin any core's spinner waited runnable in the last probe."""
        self._procs: list[subprocess.Popen[str]] = []
        try:
            for cpu in self.cpus:
                proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", _SPIN],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                self._procs.append(proc)
                os.sched_setaffinity(proc.pid, {cpu})
            one = self._spin([self._procs[0]], 100_000)[0][0]
            self.iterations = max(10_000, int(100_000 * PROBE_S / max(one, 1e-6)))
        except BaseException:
            self.close()
            raise

    def _spin(self, procs: list[subprocess.Popen[str]], n: int
              ) -> list[tuple[float, float | None]]:
        """Each spinner's wall seconds for `n` iterations and the share of them it waited
        runnable for a CPU, as the kernel counts it (None: no schedstat)."""
        for p in procs:
            assert p.stdin is not None
            p.stdin.write(f"{n}\n")
            p.stdin.flush()
        out: list[tuple[float, float | None]] = []
        for p in procs:
            assert p.stdout is not None
            wall, ran, waited = (float(v) for v in p.stdout.readline().split())
            out.append((wall, waited / (ran + waited) if ran >= 0 and ran + waited > 0 else None))
        return out

    def spin(self, cores: int) -> tuple[list[float], list[float]]:
        """The first `cores` cores spun at once: each one's rate (iterations a second) and the
        share of its spin it waited runnable (0 where the kernel does not say)."""
        spun = self._spin(self._procs[:cores], self.iterations)
        return ([self.iterations / max(t, 1e-9) for t, _ in spun],
                [w or 0.0 for _, w in spun])

    def measure(self, cores: int) -> float:
        """Cores the node delivered just now, of the first `cores` allotted ones (each core's
        speed beside it in `speeds`)."""
        rates, waiting = self.spin(cores)
        self.waiting = max(waiting)
        now = time.monotonic()
        cpus = self.cpus[:cores]
        history = _RATES.setdefault(tuple(cpus), deque(maxlen=MEMORY_PROBES))
        # A spin that waited for a CPU met another process on its core: its rate is that
        # process's doing, not the core's, and must not become the core's best.
        if self.waiting <= QUIET_WAITING:
            history.append((now, rates))
        while history and history[0][0] < now - MEMORY_S:
            history.popleft()
        best = []
        for i, cpu in enumerate(cpus):
            learnt = quantile([r[i] for _, r in history], BEST_QUANTILE) if history else rates[i]
            known = self.calibration.best(cpu) if self.calibration is not None else None
            best.append(max(learnt, known or 0.0))
        # Against the set's fastest core: a core slowed for longer than MEMORY_S (its own best
        # slow too) still shows.
        self.speeds = {cpu: min(1.0, r / max(best)) for cpu, r in zip(cpus, rates, strict=True)}
        # Each core counts at its speed against its best, as a share of the fastest core's:
        # a host that slows every core alike slows both sides of the ratio alike (and on our
        # VMs it does so for minutes, unseen), while one core slowed apart slows the parallel
        # side alone. And never above the share of the spin the kernel let it run: the run
        # queue says what no memory of the cores can (other work on the node's cores).
        shares = [r / b for r, b in zip(rates, best, strict=True)]
        top = min(1.0, max(shares))
        return sum(min(1.0, share / top, 1.0 - w)
                   for share, w in zip(shares, waiting, strict=True))

    def close(self) -> None:
        for p in self._procs:
            with contextlib.suppress(OSError):
                p.kill()
            p.wait()
        self._procs = []

    def __enter__(self) -> CapacityProbe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def calibrate(cpus: list[int], *, seconds: float = calibration.CALIBRATION_S) -> calibration.Calibration:
    """Spin `cpus` together as the probe does, for about `seconds`; NodeBusy where the kernel
    says the node was not idle meanwhile."""
    before = calibration.pressure()
    if before is not None and before > calibration.QUIET_PRESSURE:
        raise calibration.NodeBusy(
            f"the node's CPU pressure is {before:.0f} % (tasks waited for a CPU {before:.0f} % "
            f"of the last 10 s; idle is under {calibration.QUIET_PRESSURE:g} %)")
    quiet: list[list[float]] = []
    taken = 0
    end = time.monotonic() + seconds
    with CapacityProbe(cpus) as probe:
        while time.monotonic() < end:
            rates, waiting = probe.spin(len(cpus))
            taken += 1
            if max(waiting) <= calibration.QUIET_WAITING:
                quiet.append(rates)
            time.sleep(0.02)
    after = calibration.pressure()
    if len(quiet) < calibration.QUIET_SHARE * taken:
        raise calibration.NodeBusy(f"{taken - len(quiet)} of {taken} probes waited for a CPU "
                                   "(another process ran on the cores)")
    if after is not None and after > calibration.QUIET_PRESSURE:
        raise calibration.NodeBusy(f"the node's CPU pressure rose to {after:.0f} % while it "
                                   "was measured")
    best = {cpu: round(quantile([r[i] for r in quiet], BEST_QUANTILE), 1)
            for i, cpu in enumerate(cpus)}
    return calibration.Calibration(host=socket.gethostname(),
                       made_at=datetime.now(UTC).isoformat(timespec="seconds"), rates=best,
                       pressure=after, probes=len(quiet))


def busy_now(cpus: list[int], *, probes: int = 5) -> bool:
    """Whether other work keeps `cpus` busy just now (nothing of a grading's alive): most of a
    few probes waited for a CPU, or the node's CPU pressure is over the busy line."""
    with CapacityProbe(cpus) as probe:
        waited = [max(probe.spin(len(cpus))[1]) for _ in range(probes)]
    level = pressure()
    return (statistics.median(waited) > QUIET_WAITING
            or (level is not None and level > calibration.QUIET_PRESSURE))


def await_free(cpus: list[int], *, within_s: float, every_s: float = 5.0) -> bool:
    """Wait until `cpus` are free of other work (`busy_now`), for at most `within_s`; whether
    they freed."""
    deadline = time.monotonic() + within_s
    while busy_now(cpus):
        if time.monotonic() > deadline:
            return False
        time.sleep(every_s)
    return True


@dataclass
class Windows:
    """The account of one worker count's timed windows: probes, re-timed and kept-short ones."""

    cores: int
    budget_s: float
    started: float = field(default_factory=time.monotonic)
    delivered: list[float] = field(default_factory=list)
    """Cores the node delivered in each window."""
    retimed: int = 0
    kept_short: int = 0
    speeds: dict[int, list[float]] = field(default_factory=dict)
    """Each core's speed in every probe (CapacityProbe.speeds), by core."""
    waiting: list[float] = field(default_factory=list)
    """The share of its spin the probe waited runnable for a CPU, in every probe."""
    calibrated: bool = False
    """Whether the probes were compared with the host's calibration (else their own past)."""
    baseline_waiting: list[float] = field(default_factory=list)
    """The share of its timed calls the serial baseline waited for a CPU, in every window."""

    def saw(self, speeds: dict[int, float], waiting: float = 0.0,
            calibrated: bool = False) -> None:
        """One probe's reading: each core's speed, the share of its spin it waited for a CPU,
        and whether it was compared with the host's calibration."""
        for cpu, v in speeds.items():
            self.speeds.setdefault(cpu, []).append(v)
        self.waiting.append(waiting)
        self.calibrated = calibrated

    def speeds_note(self) -> str | None:
        """How fast each core ran around the timed windows, in words (None: not probed)."""
        if not self.speeds:
            return None
        each = ", ".join(f"core {cpu} at {statistics.median(v):.2f}"
                         for cpu, v in sorted(self.speeds.items()))
        return (f"the cores ran, median over the probes around the timed windows: {each} of the "
                "set's fastest core's best")

    def short(self, cores: float) -> bool:
        return cores < SHORT_SHARE * self.cores

    def keep(self, cores: float, baseline_waiting: float | None = None) -> bool:
        """Whether a window in which the probes found the node delivering `cores` counts (else
        its calls are timed again). Never more than the cores the baseline found: a core it
        waited for `baseline_waiting` of its calls was that much another's, and so, for all the
        baseline can tell, was every core (its calls visit them in turn)."""
        if baseline_waiting is not None:
            self.baseline_waiting.append(baseline_waiting)
            cores = min(cores, self.cores * (1.0 - baseline_waiting))
        self.delivered.append(cores)
        if not self.short(cores):
            return True
        if time.monotonic() - self.started > RETIME_FACTOR * self.budget_s:
            self.kept_short += 1
            return True
        self.retimed += 1
        return False

    @property
    def unreliable(self) -> bool:
        """Whether the figure was measured under interference: most windows found the node short
        (whether they were timed again or, past the re-timing budget, kept)."""
        short = sum(self.short(c) for c in self.delivered)
        return bool(self.delivered) and short / len(self.delivered) > UNRELIABLE_SHARE

    @property
    def stayed_short(self) -> bool:
        """Whether most counted windows are short ones kept: the node did not come back."""
        counted = len(self.delivered) - self.retimed
        return counted > 0 and self.kept_short / counted > UNRELIABLE_SHARE

    def figure(self) -> Interference:
        """These windows as the report carries them."""
        short = [c for c in self.delivered if self.short(c)]
        return Interference(cores=self.cores, windows=len(self.delivered), short=len(short),
                            retimed=self.retimed,
                            delivered=round(statistics.median(short), 3) if short else None,
                            unreliable=self.unreliable,
                            waiting=round(statistics.median(self.waiting), 3)
                            if self.waiting else None,
                            baseline_waiting=round(statistics.median(self.baseline_waiting), 3)
                            if self.baseline_waiting else None,
                            calibrated=self.calibrated, pressure=pressure())

    def note(self) -> str | None:
        """What the report says of these windows (None: the node delivered its cores)."""
        short = [c for c in self.delivered if self.short(c)]
        if not short:
            return None
        n = len(self.delivered)
        typical = statistics.median(short)
        text = (f"{len(short)} of {n} timed windows found the node short (it delivered "
                f"{typical:.1f} of its {self.cores} cores)")
        if self.stayed_short:
            text += (f"; the node did not come back, so {self.kept_short} of them count: "
                     "this speedup was measured under interference and may be low")
        elif self.unreliable:
            text += ("; the node was short in most of them, so the windows that counted may "
                     "have been short too: this speedup was measured under interference and may "
                     "be off either way")
        elif self.kept_short:
            again = f"{self.retimed} were timed again, and " if self.retimed else ""
            text += f": {again}{self.kept_short} count (the node did not come back in time)"
        else:
            text += ": their calls were timed again"
        return text


class Gauge:
    """Probes around each timed window of one worker count (runs `probe` on `cores` cores)."""

    def __init__(self, probe: CapacityProbe, cores: int, budget_s: float) -> None:
        self.probe = probe
        self.cores = cores
        self.windows = Windows(cores, budget_s)
        self._before: float | None = None

    def begin(self) -> None:
        """Probe before the first window (and after a pause in which no window was timed)."""
        self._before = self.probe.measure(self.cores)
        self.windows.saw(self.probe.speeds, self.probe.waiting,
                          self.probe.calibration is not None)

    def counts(self, baseline_waiting: float | None = None) -> bool:
        """Probe after a window: whether its calls count. `baseline_waiting`: the share of its
        timed calls in the window the serial baseline waited for a CPU (None: not read)."""
        after = self.probe.measure(self.cores)
        self.windows.saw(self.probe.speeds, self.probe.waiting,
                          self.probe.calibration is not None)
        before = after if self._before is None else self._before
        self._before = after
        return self.windows.keep(max(before, after), baseline_waiting)
