"""The per-device stateful step of the telemetry job (Spark's transformWithState).

Input rows are grouped by device; quarantined records (key None) pass straight through.
For each device, Spark keeps one state value: the rolling baseline (the last `baseline`
temperatures), the readings not scored yet, the open window buckets and the device's
clock. A reading is emitted at once and counted in its windows. It is scored against the
baseline once the device's own event time is `lateness` past it, in (timestamp, id) order,
so readings the mesh delivers out of order score as if they had come in order. Windows are
emitted when the device's event time passes their end plus `lateness`; everything left
is scored and emitted when the device has been silent for `idle_close` (processing time,
while the job runs). Every output row has `kind`: reading, anomaly, quarantine, tumbling
or sliding.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

from enmesh_spark.windows import Aggregate, OpenWindows

INPUT_COLUMNS = (
    "device", "id", "ts_ms", "temperature", "humidity", "received_ms", "body", "reason"
)  # fmt: skip
OUTPUT_SCHEMA = (
    "kind string, id string, device string, ts_ms long, temperature double, humidity double, "
    "received_ms long, body string, reason string, late boolean, "
    "baseline_mean double, baseline_std double, z double, window_start_ms long, "
    "window_end_ms long, count long, mean double, min double, max double, p95 double"
)
OUTPUT_FIELDS = tuple(part.split()[0] for part in OUTPUT_SCHEMA.split(", "))
STATE_SCHEMA = (
    "baseline array<double>, latest_ms long, tumbling_from long, sliding_from long, "
    "minutes array<long>, bucket_values array<array<double>>, timer_ms long, silent boolean, "
    "pending array<struct<ts_ms long, id string, temperature double>>"
)


@dataclass(frozen=True)
class Settings:
    baseline: int = 50  # readings in the rolling baseline
    min_baseline: int = 10  # readings needed before scoring
    threshold: float = 4.0  # |z| above it is an anomaly
    lateness_ms: int = 10_000
    idle_close_ms: int = 60_000


@dataclass
class Device:
    """One device's state, as kept between batches."""

    baseline: list[float] = field(default_factory=list)
    latest_ms: int | None = None
    windows: OpenWindows = field(default_factory=OpenWindows)
    timer_ms: int | None = None
    silent: bool = False  # the silence timer fired once with no reading since
    pending: list[tuple[int, str, float]] = field(default_factory=list)  # not scored yet

    @classmethod
    def load(cls, stored: tuple[Any, ...] | None) -> Device:
        if stored is None:
            return cls()
        baseline, latest, tumbling_from, sliding_from, minutes, values, timer, silent, pending = (
            stored
        )
        buckets = {int(m): list(v) for m, v in zip(minutes or (), values or (), strict=True)}
        return cls(
            list(baseline or ()), latest, OpenWindows(buckets, tumbling_from, sliding_from),
            timer, bool(silent), [tuple(p) for p in pending or ()],
        )  # fmt: skip

    def dump(self) -> tuple[Any, ...]:
        minutes = sorted(self.windows.buckets)
        return (
            self.baseline, self.latest_ms, self.windows.tumbling_from, self.windows.sliding_from,
            minutes, [self.windows.buckets[m] for m in minutes], self.timer_ms, self.silent,
            self.pending,
        )  # fmt: skip

    def score(self, until_ms: int | None, settings: Settings) -> Iterator[dict[str, Any]]:
        """Score the pending readings before `until_ms` (None: all) in (timestamp, id)
        order, each against the readings before it; yields the anomalies."""
        self.pending.sort()
        cut = len(self.pending)
        if until_ms is not None:
            cut = next((i for i, (ts, _, _) in enumerate(self.pending) if ts >= until_ms), cut)
        due, self.pending = self.pending[:cut], self.pending[cut:]
        for ts_ms, reading_id, temperature in due:
            previous = self.baseline
            self.baseline = [*previous, temperature][-settings.baseline :]
            if len(previous) < settings.min_baseline:
                continue
            mean = statistics.fmean(previous)
            std = statistics.stdev(previous, mean)
            if std == 0 or math.isnan(std):
                continue
            z = (temperature - mean) / std
            if abs(z) > settings.threshold:
                yield {
                    "kind": "anomaly", "id": reading_id, "ts_ms": ts_ms,
                    "temperature": temperature, "baseline_mean": mean, "baseline_std": std,
                    "z": z,
                }  # fmt: skip


def _row(**values: Any) -> Row:
    return Row(**{name: values.get(name) for name in OUTPUT_FIELDS})


def _anomaly_rows(device: str, anomalies: Iterable[dict[str, Any]]) -> Iterator[Row]:
    for anomaly in anomalies:
        yield _row(device=device, **anomaly)


def _window_rows(device: str, aggregates: Iterable[Aggregate]) -> Iterator[Row]:
    for a in aggregates:
        yield _row(
            kind=a.kind, device=device, window_start_ms=a.start_ms, window_end_ms=a.end_ms,
            count=a.count, mean=a.mean, min=a.min, max=a.max, p95=a.p95,
        )  # fmt: skip


class DeviceProcessor(StatefulProcessor):
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.state = handle.getValueState("device", STATE_SCHEMA)

    def handleInputRows(  # noqa: N802  (Spark's API)
        self,
        key: Any,
        rows: Iterator[Row],
        timerValues: TimerValues,  # noqa: N803
    ) -> Iterator[Row]:
        (name,) = key
        if name is None:  # quarantined records are grouped under a null key
            for row in rows:
                yield _row(kind="quarantine", **{c: row[c] for c in INPUT_COLUMNS})
            return
        device = Device.load(self.state.get())  # None for a new device: one call
        for row in sorted(rows, key=lambda r: (r.ts_ms, r.id)):
            fields = {c: row[c] for c in INPUT_COLUMNS if c not in ("body", "reason")}
            late = not device.windows.add(row.ts_ms, row.temperature, self.settings.lateness_ms)
            yield _row(kind="reading", late=late, **fields)
            device.pending.append((row.ts_ms, row.id, row.temperature))
            device.latest_ms = max(device.latest_ms or row.ts_ms, row.ts_ms)
        if device.latest_ms is not None:
            until = device.latest_ms - self.settings.lateness_ms
            yield from _anomaly_rows(name, device.score(until, self.settings))
            yield from _window_rows(name, device.windows.close(until))
        self._arm(device, timerValues.getCurrentProcessingTimeInMs())
        device.silent = False
        self.state.update(device.dump())

    def handleExpiredTimer(  # noqa: N802
        self,
        key: Any,
        timerValues: TimerValues,  # noqa: N803
        expiredTimerInfo: ExpiredTimerInfo,  # noqa: N803
    ) -> Iterator[Row]:
        """Silence is two timer expiries in a row with no reading in between, each half of
        `idle_close` apart, both on time: a timer may fire at the start of a batch that
        still holds the device's readings, and one that fires late (the job was down or
        stalled) observed nothing, so it starts the count again."""
        (name,) = key
        device = Device.load(self.state.get())
        device.timer_ms = None
        now = timerValues.getCurrentProcessingTimeInMs()
        on_time = now - expiredTimerInfo.getExpiryTimeInMs() <= self.settings.idle_close_ms // 2
        if not (device.silent and on_time):
            device.silent = on_time
            self._arm(device, now)
            self.state.update(device.dump())
            return
        device.silent = False
        yield from _anomaly_rows(name, device.score(None, self.settings))
        yield from _window_rows(name, device.windows.flush())
        self.state.update(device.dump())

    def _arm(self, device: Device, now_ms: int) -> None:
        if device.timer_ms is not None:
            self.handle.deleteTimer(device.timer_ms)
        device.timer_ms = now_ms + self.settings.idle_close_ms // 2
        self.handle.registerTimer(device.timer_ms)
