"""A speedup anchored to the reference: the submission timed beside the package's own reference
solution, on the same cores, in the same turns, on the same inputs.

    S = S_ref × r,    r = median over turns i of T_ref,i / T_sub,i

S_ref is the reference's speedup over the serial baseline on this runner class, measured when the
package version was validated and pooled with every grading's own measurement of it since
(server/services/grades/reference.py); r compares two programs that use the same cores at the same
time. Where the host changes a core's speed, a static split paces at its slowest core on both
sides, so the change cancels in r; the plain ratio T_base / T_sub sets a serial program on one
core against a parallel one on all of them, and takes such a change on one side only. Measured
with a plain script on these 2-vCPU VMs in a noisy hour: a serial/parallel ratio varied with a
CV of 20.5 % between "gradings" of 5 calls, a parallel/parallel ratio of the same programs 9.1 %
(median 0.897 against a true 0.909); on an H200 node's busy 2-core slices 10.6 % against 7.1 %
(../shared RUNTIME-NOTES, "Same cores, same time"; docs/gpu-validation.md).

What follows from it:
- A submission that is the reference gets S_ref, whatever the hour: r is 1 up to the noise that
  the two programs do not share.
- A submission faster than the reference gets more than S_ref, in proportion. The baseline is
  still timed in every grading, so the credit rule (runners/measure/credit.py) still reads busy
  cores and work against the baseline's: a closed form (less work) is refused as before, and the
  cap by cores bounds S.
- A dynamic split (a pool's small chunks, work stealing) on a node that slows one core keeps its
  cores busy where a static reference waits for its slowest piece: r then favours it by what the
  uneven node costs a static split, as the node itself would.
- Where no S_ref is stored (a version no runner has validated yet, `paragrade grade` without
  `--reference-speedup`), nothing is anchored: the figure is the plain ratio to the baseline.
- The credit rule reads busy cores the same way (runners/measure/credit.py): the parallel gain
  that explains S is S_ref × the submission's busy cores over the reference's in the same turns,
  not its busy cores over the serial baseline's, which a host that slows cores unseen lowers
  on one side only (a noisy hour cut anchored figures of 1.9-2.3× on 2 cores to 26-38 of 40
  points that way).
- Every grading also times the reference beside the baseline, so it reports the reference's own
  plain ratio (`reference_measured`): the server pools those over the version's gradings, one
  vote per student beside the validation's (server/services/grades/reference.py), so that S_ref comes
  from many rounds at quiet and busy times rather than from one validation's hour.
- The interval is S_ref × the interval of r, from a moving-block bootstrap over consecutive
  turns (a node's bad episodes last several turns, so single turns are not independent). S_ref's
  own uncertainty moves every student's figure alike and is not in it.
"""

from __future__ import annotations

import math

import numpy as np

from runners.measure import placement
from runners.measure.stats import BOOTSTRAP, Samples, karp_flatt
from runners.protocol import Anchor, ScalingPoint, SpeedupFigure

SAME_AS_REFERENCE = 0.005
"""Within half a per cent of the reference, a report says "as fast as the reference"."""


def block_length(turns: int) -> int:
    """Turns per bootstrap block: the cube root of their number (about n^(1/3) is the usual
    choice for a median of a weakly dependent series), at least one."""
    return max(1, round(math.cbrt(turns)))


def block_resamples(n: int, rng: np.random.Generator, reps: int = BOOTSTRAP) -> np.ndarray:
    """Indices of `reps` moving-block resamples of n values in time order (reps × n): runs of
    `block_length(n)` consecutive indices, each run starting anywhere it fits."""
    length = block_length(n)
    starts = rng.integers(0, n - length + 1, (reps, math.ceil(n / length)))
    return (starts[:, :, None] + np.arange(length)).reshape(reps, -1)[:, :n]


def block_bootstrap_median(values: np.ndarray, rng: np.random.Generator,
                           reps: int = BOOTSTRAP) -> np.ndarray:
    """Medians of `reps` moving-block resamples of `values` (kept in their time order)."""
    return np.asarray(np.median(values[block_resamples(len(values), rng, reps)], axis=1))


def measure(samples: Samples, reference_speedup: float, *, seed: int = 0,
            level: float = 0.95) -> Anchor | None:
    """The anchor of one worker count's samples; None where the reference was not timed beside
    the submission turn by turn, or no reference speedup is known."""
    ref, sub = np.asarray(samples.reference), np.asarray(samples.submission)
    if reference_speedup <= 0 or len(ref) == 0 or len(ref) != len(sub) or min(sub) <= 0:
        return None
    turns = ref / sub
    cores = None
    cpu_ref, cpu_sub = samples.reference_cpu, samples.submission_cpu
    if len(cpu_ref) == len(ref) and len(cpu_sub) == len(sub) and all(
            c is not None and c > 0 for c in [*cpu_ref, *cpu_sub]):
        busy = (np.asarray(cpu_sub, dtype=float) / sub) / (np.asarray(cpu_ref, dtype=float) / ref)
        cores = round(float(np.median(busy)), 4)
    boot = block_bootstrap_median(turns, np.random.default_rng(seed))
    lo, hi = np.percentile(boot, [(1 - level) / 2 * 100, (1 + level) / 2 * 100])
    plain, _, _ = samples.speedup(seed=seed)
    measured = None
    if samples.baseline:
        measured = round(float(placement.baseline_time(
            np.asarray(samples.baseline), samples.baseline_core) / np.median(ref)), 4)
    return Anchor(reference_speedup=round(reference_speedup, 4),
                  versus_reference=round(float(np.median(turns)), 4),
                  versus_ci_low=round(float(lo), 4), versus_ci_high=round(float(hi), 4),
                  reference_median_s=float(np.median(ref)), turns=len(turns),
                  baseline_speedup=round(plain, 4), cores_versus_reference=cores,
                  reference_measured=measured if measured and measured > 0 else None)


def apply(figure: SpeedupFigure, point: ScalingPoint, anchor: Anchor
          ) -> tuple[SpeedupFigure, ScalingPoint]:
    """The headline figure and its scaling point, anchored."""
    s = anchor.reference_speedup
    median = round(s * anchor.versus_reference, 4)
    lo, hi = round(s * anchor.versus_ci_low, 4), round(s * anchor.versus_ci_high, 4)
    kf = karp_flatt(median, point.workers)
    return (figure.model_copy(update={"median": median, "ci_low": lo, "ci_high": hi,
                                      "anchor": anchor}),
            point.model_copy(update={"speedup": median, "ci_low": lo, "ci_high": hi,
                                     "efficiency": round(median / point.workers, 4),
                                     "karp_flatt": None if kf is None else round(kf, 4)}))


def note(anchor: Anchor) -> str:
    """What was compared with what, in words a student can read."""
    r = anchor.versus_reference
    if abs(r - 1) < SAME_AS_REFERENCE:
        how = "as fast as the reference"
    else:
        how = f"{abs(r - 1) * 100:.1f} % {'faster' if r > 1 else 'slower'} than the reference"
    return (f"timed beside the reference on the same cores: your code ran {how} "
            f"({anchor.turns} turns, 95 % CI {anchor.versus_ci_low:.3f}–{anchor.versus_ci_high:.3f}× "
            f"its speed); the reference's speedup on this runner class, measured when this version "
            f"was validated and in its gradings since, is {anchor.reference_speedup:.2f}×, so "
            f"yours is "
            f"{anchor.reference_speedup * r:.2f}× (against the serial baseline alone this grading "
            f"measured {anchor.baseline_speedup:.2f}×)")
