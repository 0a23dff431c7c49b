"""When two leaderboard aliases look alike.

An alias's keys are ICU's UTS #39 skeletons of it after Unicode compatibility normalisation
(NFKC: fullwidth and styled letters become plain ones), taken with case folded before and after
the skeleton, whitespace runs taken as one space and combining marks dropped: `alice`, `Alice`,
`ALICE`, `ALİCE` (a dotted capital I), `аlice` (a Cyrillic а), `ａｌｉｃｅ`, `ᴀʟɪᴄᴇ` (small
capitals, which NFKC keeps) and `aIice` (a capital I for the l) all share a key, as do
`bob smith` and `bob  smith`, so a student cannot appear on a board as someone else. The
board's own labels (`student-<id>`, its digits also as what looks like them) are nobody's
alias. ICU keeps the confusables table current with Unicode; no table of ours to maintain.
"""

from __future__ import annotations

import re
import unicodedata
from functools import cache

import icu


@cache
def _checker() -> icu.SpoofChecker:
    return icu.SpoofChecker()


def _skeleton(text: str) -> str:
    return str(_checker().getSkeleton(0, text))


@cache
def _small_capitals() -> dict[int, str]:
    """Small capital letters (`ᴀʟɪᴄᴇ`) as the letters they show: NFKC keeps them apart."""
    out = {}
    for code in range(0x250, 0x1E000):
        m = re.fullmatch(r"LATIN LETTER SMALL CAPITAL ([A-Z])", unicodedata.name(chr(code), ""))
        if m:
            out[code] = m.group(1).lower()
    return out


def _plain(alias: str) -> str:
    """NFKC, small capitals as letters, whitespace runs as one space, and no combining marks
    after case folding (a folded `İ` is `i` + U+0307, which shows as the `i` it sits on)."""
    folded = unicodedata.normalize("NFKC", " ".join(alias.split())).translate(
        _small_capitals()).casefold()
    return unicodedata.normalize("NFC", "".join(
        ch for ch in unicodedata.normalize("NFD", folded) if unicodedata.category(ch) != "Mn"))


def keys(alias: str) -> frozenset[str]:
    """The look-alike keys of an alias: two aliases that share one are confusable."""
    plain = " ".join(unicodedata.normalize("NFKC", alias).translate(_small_capitals()).split())
    return frozenset({_skeleton(_plain(plain)), _skeleton(_plain(_skeleton(plain))),
                      _skeleton(plain.casefold())})


@cache
def _reserved() -> re.Pattern[str]:
    """The board's own label for a student without an alias (`student-<id>`), its digits also as
    what looks like them (`student-7O` is `student-70`): no one may take it."""
    looks = {c for d in "0123456789" for form in (d, _skeleton(d)) for c in (form, form.casefold())}
    return re.compile(rf"student-[{re.escape(''.join(sorted(looks)))}]+")


def reserved(alias: str) -> bool:
    """Whether an alias looks like one of the board's own labels."""
    return any(_reserved().fullmatch(key) for key in keys(alias) | {_plain(alias)})


def confusable(a: str, b: str) -> bool:
    return not keys(a).isdisjoint(keys(b))
