"""Submissions for similarity tests: honest ones are independently written modules of Python's
standard library (120–320 lines; none shares 25 % of its code with another, checked with
copydetect when the list was made), and a near-copy is one of them disguised the way students
disguise a copy: every name renamed, comments rewritten, blank lines and spacing changed."""

from __future__ import annotations

import builtins
import io
import keyword
import sysconfig
import tokenize
from pathlib import Path

HONEST = [
    "__future__.py", "_compat_pickle.py", "_compression.py", "_py_abc.py", "_threading_local.py",
    "_weakrefset.py", "asynchat.py", "asyncio/base_subprocess.py", "asyncio/protocols.py",
    "asyncio/queues.py", "asyncio/runners.py", "asyncio/staggered.py", "asyncio/subprocess.py",
    "asyncio/taskgroups.py", "asyncio/timeouts.py", "asyncio/windows_utils.py", "cProfile.py",
    "chunk.py", "code.py", "codeop.py", "colorsys.py", "concurrent/futures/thread.py", "copy.py",
    "copyreg.py", "crypt.py", "ctypes/macholib/dyld.py", "ctypes/wintypes.py",
    "curses/has_key.py", "curses/textpad.py", "dbm/__init__.py", "dbm/dumb.py",
    "email/contentmanager.py", "email/mime/image.py", "email/parser.py", "filecmp.py",
    "fnmatch.py", "getopt.py", "getpass.py", "glob.py", "graphlib.py", "hmac.py",
    "html/__init__.py", "http/__init__.py", "importlib/__init__.py", "importlib/util.py",
    "linecache.py", "mailcap.py", "importlib/resources/readers.py", "importlib/resources/abc.py",
]
"""49 honest submissions."""


def honest(n: int = len(HONEST)) -> list[str]:
    root = Path(sysconfig.get_paths()["stdlib"])
    return [(root / name).read_text("utf-8") for name in HONEST[:n]]


def disguise(source: str) -> str:
    """`source` with every name renamed (not keywords, builtins, self and cls: nobody renames
    those), comments rewritten, spacing changed."""
    out: list[tokenize.TokenInfo] = []
    names: dict[str, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.NAME and not keyword.iskeyword(tok.string) \
                and not hasattr(builtins, tok.string) and tok.string not in ("self", "cls"):
            tok = tok._replace(string=names.setdefault(tok.string, f"v{len(names)}_x"))
        elif tok.type == tokenize.COMMENT:
            tok = tok._replace(string="# my own work")
        out.append(tok)
    text = tokenize.untokenize((t.type, t.string) for t in out)
    return "\n\n".join(line.rstrip() for line in text.splitlines()) + "\n"
