"""The window check the telemetry tests share: what the job emitted (from the device step
or from Parquet) against the simulator's independent aggregates."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pytest

from enmesh_spark.simulator import Reading, expected_windows
from enmesh_spark.windows import MINUTE_MS, SLIDING_MS

# kind -> (window length, slide; None: tumbling), as the job computes them
WINDOWS: dict[str, tuple[int, int | None]] = {
    "tumbling": (MINUTE_MS, None),
    "sliding": (SLIDING_MS, MINUTE_MS),
}
# ((device, window start ms), row with the aggregates) for each window emitted
Emitted = Iterable[tuple[tuple[str, int], Any]]


def assert_windows_match(emitted: Callable[[str], Emitted], readings: list[Reading]) -> None:
    """`emitted(kind)` holds exactly the windows `readings` give, each once, with exact
    aggregates."""
    for kind, (window_ms, slide_ms) in WINDOWS.items():
        expected = expected_windows(readings, window_ms, slide_ms)
        rows = list(emitted(kind))
        got = dict(rows)
        assert len(got) == len(rows), f"{kind}: a window emitted twice"
        missing, extra = sorted(set(expected) - set(got)), sorted(set(got) - set(expected))
        assert not (missing or extra), f"{kind}: missing {missing[:5]} extra {extra[:5]}"
        for key, want in expected.items():
            assert got[key]["count"] == want["count"], (kind, key)
            for field in ("mean", "min", "max", "p95"):
                assert got[key][field] == pytest.approx(want[field], abs=1e-9), (kind, key, field)
