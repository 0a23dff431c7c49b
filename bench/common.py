"""What every benchmark script does with its figures: print a Markdown table, keep the JSON."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

RESULTS = Path(os.environ.get("PARAGRADE_BENCH_RESULTS") or Path(__file__).parent / "results")
"""Where the JSON (and any figure a bench draws) goes; the suite's runs of every bench send
theirs elsewhere (tests/test_benches.py), so a tiny run never replaces a recorded one."""


def figure(default: Path) -> Path:
    """Where a bench draws its figure: `default` (in docs/), or the results folder when that is
    set."""
    return RESULTS / default.name if os.environ.get("PARAGRADE_BENCH_RESULTS") else default


def publish(name: str, rows: list[dict[str, Any]], columns: dict[str, str], extra: Any = None) -> None:
    """Print `rows` as a Markdown table (columns: key -> header with format) and save them."""
    keys = list(columns)
    print("| " + " | ".join(columns[k].split("%")[0].strip() for k in keys) + " |")
    print("|" + "---|" * len(keys))
    for r in rows:
        cells = []
        for k in keys:
            fmt = columns[k].split("%", 1)[1] if "%" in columns[k] else ""
            cells.append(format(r[k], fmt) if fmt else str(r[k]))
        print("| " + " | ".join(cells) + " |")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps({"rows": rows, "extra": extra}, indent=2))
