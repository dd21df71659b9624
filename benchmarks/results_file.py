"""Where a benchmark's figures go: printed, and written to benchmarks/results/<name>.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def publish(result: dict[str, Any], path: Path) -> int:
    """Print `result` and write it to `path` (under RESULTS_DIR); 0, for main's exit."""
    text = json.dumps(result, indent=2)
    print(text)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")
    return 0
