"""Similarity runs: which submissions of an assignment share code, with copydetect.

copydetect tokenizes each submission (names and literals become placeholders, so renaming and
reformatting do not hide a copy), fingerprints its k-grams by winnowing and compares the
fingerprints. The package's starter, baseline and reference are boilerplate: code every student
was given (or that solves the task the expected way) is never evidence of copying.

Only pairs that share at least one fingerprint are compared (an inverted index finds them), so
500 submissions cost 500 fingerprints and a few thousand comparisons, not 125 000.
"""

from __future__ import annotations

import io
import time
from collections import defaultdict
from importlib.metadata import version
from itertools import combinations
from pathlib import Path

import numpy as np
from copydetect import CodeFingerprint, compare_files

from runners import package
from runners.protocol import SimilarityResult, SimilarPair, submission_text

NOISE = 25
"""Tokens in a fingerprint: shorter shared runs are noise (copydetect's default)."""
WINDOW = 1
"""Winnowing window: every fingerprint kept, so any shared run of NOISE tokens is found."""


def _fingerprint(name: str, text: str, boilerplate: np.ndarray | None = None) -> CodeFingerprint:
    return CodeFingerprint(name, NOISE, WINDOW, boilerplate=boilerplate, language="python",
                           fp=io.StringIO(text))


def boilerplate_of(folder: Path) -> np.ndarray:
    """The fingerprints of the package's starter, baseline and reference code."""
    a = package.load(folder)
    hashes: set[int] = set()
    for sub in (a.manifest.files.starter, a.manifest.files.baseline, a.manifest.files.reference):
        root = folder / sub
        if not root.is_dir():
            continue
        for path in sorted(root.rglob("*.py")):
            hashes |= _fingerprint(str(path), path.read_text("utf-8", "replace")).hashes
    return np.array(sorted(hashes), dtype=np.int64)


def _lines(text: str, slices: np.ndarray) -> list[tuple[int, int]]:
    """Character slices (2×N, starts and ends) as 1-based inclusive line ranges, merged."""
    if len(slices) == 0 or slices.size == 0:
        return []
    starts = np.cumsum([0] + [len(line) for line in text.splitlines(keepends=True)])
    out: list[tuple[int, int]] = []
    for lo, hi in zip(slices[0], slices[1], strict=True):
        first = int(np.searchsorted(starts, lo, side="right"))
        last = int(np.searchsorted(starts, max(lo, hi - 1), side="right"))
        if out and first <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], last))
        else:
            out.append((first, last))
    return out


def compare(texts: dict[int, str], *, boilerplate: np.ndarray, threshold: float
            ) -> SimilarityResult:
    """Every pair of these submissions (id → `submission_text`) whose share of code found in
    the other reaches `threshold` for either of the two, most similar first."""
    started = time.perf_counter()
    prints = {sid: _fingerprint(f"submission-{sid}", text, boilerplate)
              for sid, text in texts.items()}
    holders: dict[int, list[int]] = defaultdict(list)
    for sid, fp in prints.items():
        for h in fp.hashes:
            holders[h].append(sid)
    candidates: set[tuple[int, int]] = set()
    for sids in holders.values():
        if len(sids) > 1:
            candidates.update(combinations(sorted(sids), 2))
    pairs = []
    for a, b in sorted(candidates):
        _, (share_a, share_b), (slices_a, slices_b) = compare_files(prints[a], prints[b])
        if max(share_a, share_b) < threshold:
            continue
        pairs.append(SimilarPair(a=a, b=b, share_a=round(min(1.0, float(share_a)), 4),
                                 share_b=round(min(1.0, float(share_b)), 4),
                                 lines_a=_lines(texts[a], slices_a),
                                 lines_b=_lines(texts[b], slices_b)))
    pairs.sort(key=lambda p: (-max(p.share_a, p.share_b), p.a, p.b))
    return SimilarityResult(pairs=pairs, compared=len(candidates),
                            seconds=round(time.perf_counter() - started, 3),
                            tool=f"copydetect {version('copydetect')} (k={NOISE}, window={WINDOW})")


def texts_of(archive: dict[str, bytes]) -> dict[int, str]:
    """The zip the server sends (each submission's files under a folder named by its id) as
    id → `submission_text`."""
    grouped: dict[int, dict[str, bytes]] = defaultdict(dict)
    for name, content in archive.items():
        folder, _, rest = name.partition("/")
        if folder.isdigit() and rest:
            grouped[int(folder)][rest] = content
    return {sid: submission_text(files) for sid, files in grouped.items()}
