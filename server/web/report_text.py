"""How a report's tests read on a page: names that wrap only where a reader would break them,
and the tests a timeout left unrun said once, not once per test."""

from __future__ import annotations

from typing import Any

from markupsafe import Markup, escape

NOT_RUN = "not run: "
BREAK_AFTER = ("::", "/", "_", ".", "[")


def breakable(name: str) -> Markup:
    """`name`, escaped, with a line-break opportunity after each `::`, `/`, `_`, `.` and `[`
    (a test's path and name wrap there, never inside a word)."""
    out = str(escape(name))
    for mark in BREAK_AFTER:
        out = out.replace(mark, f"{mark}<wbr>")
    return Markup(out)


def test_rows(tests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tests as the table shows them: each one, except that consecutive tests not run for
    the same reason (a test before them ran into its time limit) are one row naming them all."""
    rows: list[dict[str, Any]] = []
    for t in tests:
        message = str(t.get("message", ""))
        at = message.find(NOT_RUN)
        reason = message[at:] if at >= 0 and t.get("outcome") == "skipped" else None
        last = rows[-1] if rows else None
        if reason is not None and last is not None and last.get("reason") == reason:
            last["names"].append(t.get("name", ""))
            last["hidden"] = last["hidden"] and bool(t.get("hidden"))
            continue
        rows.append({**t, "names": [t.get("name", "")], "reason": reason})
    return rows
