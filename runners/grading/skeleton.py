"""`paragrade assignments new SLUG`: a whole package that validates as it stands, to edit.

A task of its own (counting primes below n with `multiprocessing.Pool`) with every part a
package has: statement, starter, public tests, hidden tests sharing a helper module, the timing
hook, serial baseline and parallel reference. docs/instructors/packages.md ("Your first
package") shows the same files, and a test keeps the two equal and validates them.
"""

from __future__ import annotations

import re
from pathlib import Path

from runners.protocol.names import SLUG_RE

TITLE = "Counting primes with multiprocessing.Pool"

FILES: dict[str, str] = {
    "assignment.toml": '''\
schema = 1
slug = "{slug}"
title = "{title}"
version = "1.0.0"
statement = "statement.md"

[entry]
style = "function"
file = "solution.py"
function = "count_primes"
workers_arg = "workers"

[resources]
kind = "cpu"
cores = 2
memory_mb = 1024
wall_seconds = 60

[scoring]
test_points = 60
performance_points = 40
speedup_min = 1.0
speedup_full = 1.7
scaling_workers = [1, 2]

[timing]
hook = "timing.py"
budget_s = 20
''',
    "statement.md": '''\
# Counting primes in parallel

Write `count_primes(n, workers)` in `solution.py`: how many primes are below `n`. Share the
range among `workers` processes with `multiprocessing.Pool` so that each does a fair share
(a large number costs more to test than a small one).

Run the public tests on your machine first: download the starter, then run
`python -m pytest -q public_tests` in its folder (its README.txt says more).
''',
    "starter/solution.py": '''\
"""Count the primes below n, in parallel."""


def is_prime(k: int) -> bool:
    if k < 2:
        return False
    d = 2
    while d * d <= k:
        if k % d == 0:
            return False
        d += 1
    return True


def count_primes(n: int, workers: int) -> int:
    # TODO: share the range among `workers` processes (multiprocessing.Pool)
    raise NotImplementedError("count the primes below n with a Pool of workers")
''',
    "public_tests/test_public.py": '''\
"""Tests you can run yourself: `pytest public_tests` next to solution.py."""


def test_small(submission):
    """The primes below 30: 2, 3, 5, 7, 11, 13, 17, 19, 23, 29."""
    assert submission.count_primes(30, workers=2) == 10
''',
    "hidden/expected.py": '''\
"""The right answers, shared by the hidden tests and the timing hook."""

import numpy as np


def primes_below(n: int) -> int:
    """How many primes are below n (a sieve: fast, and unlike the students' code)."""
    if n < 3:
        return 0
    sieve = np.ones(n, dtype=bool)
    sieve[:2] = False
    for k in range(2, int(n**0.5) + 1):
        if sieve[k]:
            sieve[k * k :: k] = False
    return int(sieve.sum())
''',
    "hidden/test_hidden.py": '''\
"""Hidden tests: inputs drawn per grading, answers from the helper module."""

from expected import primes_below


def test_random_ranges(submission, rng):
    """Random n up to 50 000."""
    for _ in range(3):
        n = int(rng.integers(2, 50_000))
        assert submission.count_primes(n, workers=submission.workers) == primes_below(n)


def test_edges(submission):
    """n = 0, 1, 2 and 3 have 0, 0, 0 and 1 primes below them."""
    for n, want in ((0, 0), (1, 0), (2, 0), (3, 1)):
        assert submission.count_primes(n, workers=submission.workers) == want
''',
    "hidden/timing.py": '''\
"""Timed inputs: drawn per run, every answer checked."""

from expected import primes_below


def make_input(rng, workers: int) -> dict:
    return {"n": int(rng.integers(150_000, 170_000))}


def make_warmup_input(rng, workers: int) -> dict:
    """Each sandbox's untimed first call: the pool and the imports, not the counting."""
    return {"n": 1_000}


def check(inputs: dict, result: object) -> str | None:
    if result != primes_below(inputs["n"]):
        return "the count is wrong"
    return None
''',
    "baseline/solution.py": '''\
"""The serial program the speedup is measured against."""


def is_prime(k: int) -> bool:
    if k < 2:
        return False
    d = 2
    while d * d <= k:
        if k % d == 0:
            return False
        d += 1
    return True


def count_primes(n: int, workers: int = 1) -> int:
    return sum(1 for k in range(n) if is_prime(k))
''',
    "reference/solution.py": '''\
"""Count the primes below n with a Pool: many small blocks, handed out as workers free up
(a block of large numbers costs more than one of small numbers)."""

from multiprocessing import Pool


def is_prime(k: int) -> bool:
    if k < 2:
        return False
    d = 2
    while d * d <= k:
        if k % d == 0:
            return False
        d += 1
    return True


def count_block(block: tuple[int, int]) -> int:
    start, end = block
    return sum(1 for k in range(start, end) if is_prime(k))


def count_primes(n: int, workers: int) -> int:
    size = max(1, n // (workers * 16))
    blocks = [(a, min(a + size, n)) for a in range(0, n, size)]
    with Pool(workers) as pool:
        return sum(pool.imap_unordered(count_block, blocks))
''',
}
"""Each file by its path in the package; the manifest's `{slug}` and `{title}` are filled in."""


class SkeletonError(Exception):
    """The package cannot be written where asked."""


def files(slug: str, title: str = TITLE) -> dict[str, str]:
    """The skeleton's files for a package named `slug`."""
    return {rel: text.replace("{slug}", slug).replace("{title}", title) if rel == "assignment.toml"
            else text for rel, text in FILES.items()}


def write(folder: Path, title: str = TITLE) -> list[Path]:
    """Write the skeleton into `folder` (new or empty), its name the package's slug."""
    slug = folder.name
    if not re.fullmatch(SLUG_RE, slug):
        raise SkeletonError(f"'{slug}' cannot name a package: lowercase letters, digits and '-', "
                            "starting with a letter or digit")
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise SkeletonError(f"{folder} already exists and is not empty: nothing was written")
    if '"' in title or "\\" in title or "\n" in title:
        raise SkeletonError("the title cannot hold quotes, backslashes or line breaks")
    written = []
    for rel, text in files(slug, title).items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
