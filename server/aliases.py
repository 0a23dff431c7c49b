"""When two leaderboard aliases look alike.

An alias's keys are ICU's UTS #39 skeletons of it after Unicode compatibility normalisation
(NFKC: fullwidth and styled letters become plain ones), taken with case folded before and after
the skeleton: `alice`, `Alice`, `ALICE`, `аlice` (a Cyrillic а), `ａｌｉｃｅ` and `aIice` (a capital
I for the l) all share a key, so a student cannot appear on a board as someone else. ICU keeps
the confusables table current with Unicode; no table of ours to maintain.
"""

from __future__ import annotations

import unicodedata
from functools import cache

import icu


@cache
def _checker() -> icu.SpoofChecker:
    return icu.SpoofChecker()


def _skeleton(text: str) -> str:
    return str(_checker().getSkeleton(0, text))


def keys(alias: str) -> frozenset[str]:
    """The look-alike keys of an alias: two aliases that share one are confusable."""
    plain = unicodedata.normalize("NFKC", alias).strip()
    return frozenset({_skeleton(plain.casefold()), _skeleton(_skeleton(plain).casefold())})


def confusable(a: str, b: str) -> bool:
    return not keys(a).isdisjoint(keys(b))
