"""Similarity runs on the runner side (runners/grading/similarity.py, copydetect): a disguised copy is
found among honest submissions, the package's own code never counts, and the matching lines are
where the copied code is."""

from __future__ import annotations

import numpy as np

from runners.grading import similarity
from runners.protocol import submission_text
from runners.settings import REPO_ROOT
from tests.similarity_corpus import HONEST, disguise, honest

T1 = REPO_ROOT / "assignments/treasure-hunt/t1-multiprocessing"


def _texts(sources: list[str]) -> dict[int, str]:
    return {i + 1: submission_text({"solution.py": s.encode()}) for i, s in enumerate(sources)}


def test_a_disguised_copy_is_the_one_pair_among_fifty() -> None:
    sources = honest()
    sources.append(disguise(sources[20]))  # submission 50 copies submission 21
    result = similarity.compare(_texts(sources), boilerplate=similarity.boilerplate_of(T1),
                                threshold=0.5)
    assert [(p.a, p.b) for p in result.pairs] == [(21, 50)]
    pair = result.pairs[0]
    assert min(pair.share_a, pair.share_b) > 0.8
    assert result.compared < 50 * 49 // 2  # only pairs sharing a fingerprint are compared
    assert result.tool.startswith("copydetect ")


def test_the_starter_and_reference_are_boilerplate() -> None:
    reference = (T1 / "reference/solution.py").read_text()
    starter = (T1 / "starter/solution.py").read_text()
    # Two students hand in the reference with a line of their own: nothing of theirs is alike.
    texts = _texts([reference + "\nANSWER = 42\n", starter + "\n" + reference])
    found = similarity.compare(texts, boilerplate=similarity.boilerplate_of(T1), threshold=0.3)
    assert found.pairs == []
    unfiltered = similarity.compare(texts, boilerplate=np.array([], dtype=np.int64),
                                    threshold=0.3)
    assert [(p.a, p.b) for p in unfiltered.pairs] == [(1, 2)]  # the same texts, not excluded


def test_the_matching_lines_are_the_copied_ones() -> None:
    corpus = honest()
    own = [corpus[HONEST.index(name)] for name in ("getopt.py", "glob.py", "hmac.py")]
    copied = own[1]
    a = own[0] + "\n" + copied            # a's second half is b's code
    b = disguise(copied) + "\n" + own[2]  # b's first half, renamed
    texts = _texts([a, b])
    pair, = similarity.compare(texts, boilerplate=np.array([], dtype=np.int64),
                               threshold=0.2).pairs
    a_lines = texts[1].splitlines()
    first_copied = len(submission_text({"solution.py": own[0].encode()}).splitlines()) + 1
    marked = {n for lo, hi in pair.lines_a for n in range(lo, hi + 1)}
    assert marked and min(marked) >= first_copied - 1, (min(marked), first_copied)
    assert len(marked) > 0.6 * (len(a_lines) - first_copied)
    b_marked = {n for lo, hi in pair.lines_b for n in range(lo, hi + 1)}
    b_copied_end = len(submission_text({"solution.py": disguise(copied).encode()}).splitlines())
    assert b_marked and max(b_marked) <= b_copied_end + 1

