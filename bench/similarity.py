"""A similarity run at course scale: N submissions of about 200 lines, compared as a runner
compares them. The honest ones are Python modules of 150–260 lines from the standard library
and the installed packages (distinct files, written by many people; a few are genuinely
derived from one another, which the "other pairs" column shows); one in a hundred is a
disguised copy of another (tests/similarity_corpus.py).

Usage: .venv/bin/python -m bench.similarity [N ...]   (default: 50 500)
"""

from __future__ import annotations

import hashlib
import random
import sys
import sysconfig
import time
from pathlib import Path

from bench.common import publish
from runners.grading import similarity
from runners.protocol import submission_text
from runners.settings import REPO_ROOT
from tests.similarity_corpus import disguise

T1 = REPO_ROOT / "assignments/treasure-hunt/t1-multiprocessing"


def modules(n: int) -> list[str]:
    """`n` distinct Python modules of 150–260 lines with functions in them."""
    seen, out = set(), []
    roots = [Path(sysconfig.get_paths()["stdlib"]), Path(sysconfig.get_paths()["purelib"])]
    for path in sorted(p for root in roots for p in root.rglob("*.py")):
        try:
            text = path.read_text("utf-8")
            # Code, not data: a module that is one long list of strings matches any list of
            # strings. (Compiled only once of the right shape: compiling every module took 35 s.)
            if not (150 <= text.count("\n") <= 260 and text.count("def ") >= 5):
                continue
            compile(text, str(path), "exec")
        except (UnicodeDecodeError, SyntaxError, ValueError, OSError):
            continue
        digest = hashlib.sha256(text.encode()).digest()
        if digest not in seen:
            seen.add(digest)
            out.append(text)
    random.Random(7).shuffle(out)
    return out[:n]


def corpus(n: int, copies: int) -> tuple[dict[int, str], set[tuple[int, int]]]:
    texts = dict(enumerate(modules(n - copies), start=1))
    planted = set()
    for c in range(copies):  # student n-c copies student 3c+1, disguised
        original = 3 * c + 1
        texts[n - c] = disguise(texts[original])
        planted.add((original, n - c))
    return {i: submission_text({"solution.py": t.encode()}) for i, t in texts.items()}, planted


def main() -> None:
    sizes = [int(a) for a in sys.argv[1:]] or [50, 500]
    rows = []
    boilerplate = similarity.boilerplate_of(T1)
    for n in sizes:
        texts, planted = corpus(n, copies=max(1, n // 100))
        started = time.perf_counter()
        result = similarity.compare(texts, boilerplate=boilerplate, threshold=0.5)
        seconds = time.perf_counter() - started
        found = {(p.a, p.b) for p in result.pairs}
        rows.append({"n": n, "lines": round(sum(t.count("\n") for t in texts.values()) / n),
                     "pairs": n * (n - 1) // 2, "compared": result.compared,
                     "planted": len(planted), "found": len(found & planted),
                     "others": len(found - planted), "seconds": seconds})
    publish("similarity", rows, {"n": "submissions", "lines": "lines each (mean)",
                                 "pairs": "pairs", "compared": "compared in full",
                                 "planted": "disguised copies", "found": "found",
                                 "others": "other pairs flagged", "seconds": "seconds %.1f"})


if __name__ == "__main__":
    main()
