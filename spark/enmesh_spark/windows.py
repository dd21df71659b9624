"""One device's open windows: minute buckets of readings, closed by event time or silence.

Tumbling windows are 1 minute; sliding windows are 5 minutes, starting every minute. A
window is emitted once, when it closes; readings older than the oldest open tumbling
window are late and counted in no window (a window once written is final).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

MINUTE_MS = 60_000
SLIDING_MS = 5 * MINUTE_MS


@dataclass(frozen=True)
class Aggregate:
    kind: str  # "tumbling" or "sliding"
    start_ms: int
    end_ms: int
    count: int
    mean: float
    min: float
    max: float
    p95: float


def p95(values: list[float]) -> float:
    """Linear interpolation between closest ranks, as Spark's exact `percentile`."""
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=20, method="inclusive")[18]


def aggregate(kind: str, start_ms: int, end_ms: int, values: list[float]) -> Aggregate:
    return Aggregate(
        kind, start_ms, end_ms, len(values), statistics.fmean(values), min(values),
        max(values), p95(values),
    )  # fmt: skip


def minute_of(ts_ms: int) -> int:
    return ts_ms - ts_ms % MINUTE_MS


@dataclass
class OpenWindows:
    """Buckets (minute start -> temperatures) of the windows not emitted yet.

    `tumbling_from`: tumbling windows starting before it are emitted (and readings before it
    are late); `sliding_from`: the same for sliding windows. None until the first reading."""

    buckets: dict[int, list[float]] = field(default_factory=dict)
    tumbling_from: int | None = None
    sliding_from: int | None = None

    def add(self, ts_ms: int, value: float, lateness_ms: int) -> bool:
        """Count a reading in its windows; False when it is late. The device's first
        reading opens its windows `lateness_ms` before it: readings that far behind it,
        which the mesh may deliver after it, still count."""
        minute = minute_of(ts_ms)
        if self.tumbling_from is None or self.sliding_from is None:
            self.tumbling_from = minute_of(ts_ms - lateness_ms)
            self.sliding_from = self.tumbling_from - SLIDING_MS + MINUTE_MS
        elif minute < self.tumbling_from:
            return False
        self.buckets.setdefault(minute, []).append(value)
        return True

    def close(self, until_ms: int) -> list[Aggregate]:
        """Emit the windows that end at or before `until_ms` (event time, minus lateness)."""
        frontier = minute_of(until_ms)
        return self._emit(frontier, frontier - SLIDING_MS + MINUTE_MS)

    def flush(self) -> list[Aggregate]:
        """Emit every window that holds a reading (the device went silent)."""
        if not self.buckets:
            return []
        after_last = max(self.buckets) + MINUTE_MS
        return self._emit(after_last, after_last)

    def _emit(self, tumbling_until: int, sliding_until: int) -> list[Aggregate]:
        if self.tumbling_from is None or self.sliding_from is None:
            return []
        out = [
            aggregate("tumbling", minute, minute + MINUTE_MS, self.buckets[minute])
            for minute in sorted(self.buckets)
            if self.tumbling_from <= minute < tumbling_until
        ]
        self.tumbling_from = max(self.tumbling_from, tumbling_until)
        # sliding windows that hold a reading: those starting up to 4 minutes before a bucket
        starts = {
            minute - back * MINUTE_MS
            for minute in self.buckets
            for back in range(SLIDING_MS // MINUTE_MS)
        }
        for start in sorted(s for s in starts if self.sliding_from <= s < sliding_until):
            values = [
                value
                for minute in range(start, start + SLIDING_MS, MINUTE_MS)
                for value in self.buckets.get(minute, ())
            ]
            out.append(aggregate("sliding", start, start + SLIDING_MS, values))
        self.sliding_from = max(self.sliding_from, sliding_until)
        # a bucket is needed while a sliding window that holds it is still open
        for minute in [m for m in self.buckets if m < self.sliding_from]:
            del self.buckets[minute]
        return out
