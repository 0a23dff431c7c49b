"""What every benchmark script does with its figures: print a Markdown table, keep the JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"


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
