"""A submission's code as the grading page shows it: highlighted on the server (Pygments' lexer
for the file's name; plain text where none knows it), one escaped line each, so that a line
number can be clicked to start a comment there. Student code is hostile: every fragment is
escaped, and nothing of it reaches the page unescaped."""

from __future__ import annotations

from typing import Any

from markupsafe import Markup, escape
from pygments.lexers import get_lexer_for_filename
from pygments.lexers.special import TextLexer
from pygments.token import STANDARD_TYPES
from pygments.util import ClassNotFound


def _css(ttype: Any) -> str:
    """The short class of a token's type, or of its nearest parent that has one ("k", "s"…)."""
    while ttype not in STANDARD_TYPES:
        ttype = ttype.parent
    return str(STANDARD_TYPES[ttype])


def highlighted(name: str, lines: list[str]) -> list[Markup]:
    """`lines` of the file `name`, each as escaped HTML with its tokens in classed spans."""
    try:
        lexer = get_lexer_for_filename(name, stripnl=False, ensurenl=False)
    except ClassNotFound:
        lexer = TextLexer()
    out: list[str] = [""]
    for ttype, value in lexer.get_tokens("\n".join(lines)):
        css = _css(ttype)
        for i, piece in enumerate(value.split("\n")):
            if i:
                out.append("")
            if piece:
                text = str(escape(piece))
                out[-1] += f'<span class="{css}">{text}</span>' if css else text
    out = out[:len(lines)] + [""] * (len(lines) - len(out))
    return [Markup(x) for x in out]
