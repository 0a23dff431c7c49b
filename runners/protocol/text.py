"""The one rule for text a person or a system hands the server: no control characters.

Names, emails, aliases, titles, roster cells, LMS claims are single lines shown to other people
(pages, the board, CSV exports). A NUL is refused by PostgreSQL (a 500 there, stored on SQLite),
ESC/BEL/BS reach terminals through exports and logs, and the bidirectional overrides (U+202E …)
make a name read as another in a table. `problem` says why a value is refused, and every writer
(the server's schemas, the roster import, LTI launches, and a package's manifest here) asks it
before anything is stored. It lives in the protocol package because both sides need it: the
server imports nothing else of the runners.
"""

from __future__ import annotations

import unicodedata

BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
"""Embeddings, overrides and isolates: they reorder what follows them on the page."""


C0_NAMES = {0x00: "NUL", 0x07: "BEL", 0x08: "BS", 0x09: "TAB", 0x0A: "LF", 0x0D: "CR",
            0x1B: "ESC", 0x7F: "DEL"}


def problem(value: str, what: str = "this field") -> str | None:
    """Why `value` cannot be stored as a line of text, or None."""
    for ch in value:
        if unicodedata.category(ch) in ("Cc", "Zl", "Zp", "Cs") or ch in BIDI_CONTROLS:
            name = C0_NAMES.get(ord(ch)) or unicodedata.name(ch, "")
            return (f"{what} contains a control character (U+{ord(ch):04X}"
                    f"{', ' + name if name else ''}): use letters, digits, spaces and punctuation")
    return None


def check(value: str, what: str = "this field") -> str:
    """`value`, or ValueError (pydantic's validators turn it into a 422 naming the field)."""
    if (why := problem(value, what)) is not None:
        raise ValueError(why)
    return value


def paragraphs_problem(value: str, what: str = "this field") -> str | None:
    """Why `value` cannot be stored as text of several lines (a comment, a description), or
    None: line breaks and tabs are allowed there, every other control character is not."""
    for line in value.replace("\r\n", "\n").split("\n"):
        if (why := problem(line.replace("\t", "    "), what)) is not None:
            return why
    return None
