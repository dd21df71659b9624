"""The per-device stateful step of the telemetry job (Spark's transformWithState).

Input rows are grouped by device; quarantined records (key None) pass through once.
A message whose id the step has seen in the last `dedupe` is dropped (a redelivery): the
ids are kept per device in buckets of 10 s of the device's event time, so a batch reads
and writes one or two buckets per device instead of one state entry per message; the
quarantine (its own key) keeps them in buckets of 10 s of arrival, all read when
quarantined records come (they are few). Each state variable costs every task a round
trip to register it, so the two share one map. For each device, Spark keeps one
state value: the rolling baseline (the last `baseline` temperatures), the readings not
scored yet, the open window buckets and the device's clock. A reading is emitted at once
and counted in its windows. It is scored against the baseline once the device's own
event time is `lateness` past it, in (timestamp, id) order, so readings the mesh delivers
out of order score as if they had come in order. Windows are emitted when the device's
event time passes their end plus `lateness`; everything left is scored and emitted when
the device has been silent for `idle_close` (processing time, while the job runs). Every
output row has `kind`: reading, anomaly, quarantine, tumbling or sliding.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import (
    ArrayType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
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


def _struct(**fields: DataType) -> StructType:
    return StructType([StructField(name, kind) for name, kind in fields.items()])


# State schemas as types, not DDL: each DDL string costs the state server a parse per task.
STATE_SCHEMA = _struct(
    baseline=ArrayType(DoubleType()), latest_ms=LongType(), tumbling_from=LongType(),
    sliding_from=LongType(), minutes=ArrayType(LongType()),
    bucket_values=ArrayType(ArrayType(DoubleType())), timer_ms=LongType(), quiet=IntegerType(),
    pending=ArrayType(_struct(ts_ms=LongType(), id=StringType(), temperature=DoubleType())),
)  # fmt: skip
SEEN_KEY, SEEN_IDS = _struct(bucket=LongType()), _struct(ids=ArrayType(StringType()))

DEDUPE_BUCKET_MS = 10_000  # one state entry holds the ids of 10 s (event time; arrival time
# for the quarantine, whose records may have no timestamp)
SILENT_EXPIRIES = 3  # on-time expiries of the half-idle-close timer that make a silence


@dataclass(frozen=True)
class Settings:
    baseline: int = 50  # readings in the rolling baseline
    min_baseline: int = 10  # readings needed before scoring
    threshold: float = 4.0  # |z| above it is an anomaly
    lateness_ms: int = 10_000
    idle_close_ms: int = 60_000
    dedupe_ms: int = 15 * 60_000  # a redelivery within it (processing time) is dropped


@dataclass
class Device:
    """One device's state, as kept between batches."""

    baseline: list[float] = field(default_factory=list)
    latest_ms: int | None = None
    windows: OpenWindows = field(default_factory=OpenWindows)
    timer_ms: int | None = None
    quiet: int = 0  # silence timer expiries, each on time, with no reading since
    pending: list[tuple[int, str, float]] = field(default_factory=list)  # not scored yet

    @classmethod
    def load(cls, stored: tuple[Any, ...] | None) -> Device:
        if stored is None:
            return cls()
        baseline, latest, tumbling_from, sliding_from, minutes, values, timer, quiet, pending = (
            stored
        )
        buckets = {int(m): list(v) for m, v in zip(minutes or (), values or (), strict=True)}
        return cls(
            list(baseline or ()), latest, OpenWindows(buckets, tumbling_from, sliding_from),
            timer, quiet or 0, [tuple(p) for p in pending or ()],
        )  # fmt: skip

    def dump(self) -> tuple[Any, ...]:
        minutes = sorted(self.windows.buckets)
        return (
            self.baseline, self.latest_ms, self.windows.tumbling_from, self.windows.sliding_from,
            minutes, [self.windows.buckets[m] for m in minutes], self.timer_ms, self.quiet,
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
            mean, std = _mean_and_std(previous)
            if std == 0 or math.isnan(std):
                continue
            z = (temperature - mean) / std
            if abs(z) > settings.threshold:
                yield {
                    "kind": "anomaly", "id": reading_id, "ts_ms": ts_ms,
                    "temperature": temperature, "baseline_mean": mean, "baseline_std": std,
                    "z": z,
                }  # fmt: skip


def _mean_and_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation, correctly rounded sums (math.fsum). Not
    `statistics.stdev`: it sums exactly in fractions, ten times slower, and runs once per
    reading."""
    mean = math.fsum(values) / len(values)
    return mean, math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1))


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


def _by_bucket(rows: Iterable[Row], time_field: str) -> dict[int, list[Row]]:
    """Rows by the dedupe bucket of their `time_field` (milliseconds)."""
    buckets: dict[int, list[Row]] = {}
    for row in rows:
        buckets.setdefault(row[time_field] // DEDUPE_BUCKET_MS, []).append(row)
    return buckets


class DeviceProcessor(StatefulProcessor):
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.state = handle.getValueState("device", STATE_SCHEMA)
        ttl = self.settings.dedupe_ms
        self.seen_ids = handle.getMapState("seen", SEEN_KEY, SEEN_IDS, ttl)

    def handleInputRows(  # noqa: N802  (Spark's API)
        self,
        key: Any,
        rows: Iterator[Row],
        timerValues: TimerValues,  # noqa: N803
    ) -> Iterator[Row]:
        (name,) = key
        if name is None:  # quarantined records are grouped under a null key
            for row in self._new_quarantined(rows):
                yield _row(kind="quarantine", **{c: row[c] for c in INPUT_COLUMNS})
            return
        new = self._new_readings(rows)
        if not new:
            return
        device = Device.load(self.state.get())  # None for a new device: one call
        for row in sorted(new, key=lambda r: (r.ts_ms, r.id)):
            fields = {c: row[c] for c in INPUT_COLUMNS if c not in ("body", "reason")}
            late = not device.windows.add(row.ts_ms, row.temperature, self.settings.lateness_ms)
            yield _row(kind="reading", late=late, **fields)
            device.pending.append((row.ts_ms, row.id, row.temperature))
            device.latest_ms = max(device.latest_ms or row.ts_ms, row.ts_ms)
        if device.latest_ms is not None:
            until = device.latest_ms - self.settings.lateness_ms
            yield from _anomaly_rows(name, device.score(until, self.settings))
            yield from _window_rows(name, device.windows.close(until))
        device.quiet = 0
        if device.timer_ms is None:
            self._arm(device, timerValues.getCurrentProcessingTimeInMs())
        self.state.update(device.dump())

    def handleExpiredTimer(  # noqa: N802
        self,
        key: Any,
        timerValues: TimerValues,  # noqa: N803
        expiredTimerInfo: ExpiredTimerInfo,  # noqa: N803
    ) -> Iterator[Row]:
        """Silence is three timer expiries in a row, each on time, with no reading since
        the first: the timer is armed every half `idle_close` (not moved by each batch,
        which would cost two timer calls per device and batch), so the last reading came
        before the first of them and the silence lasted at least `idle_close` (at most one
        and a half). A timer that fires late (the job was down or stalled) observed
        nothing, so it starts the count again."""
        (name,) = key
        device = Device.load(self.state.get())
        device.timer_ms = None
        now = timerValues.getCurrentProcessingTimeInMs()
        on_time = now - expiredTimerInfo.getExpiryTimeInMs() <= self.settings.idle_close_ms // 2
        device.quiet = device.quiet + 1 if on_time else 0
        if device.quiet < SILENT_EXPIRIES:
            self._arm(device, now)
            self.state.update(device.dump())
            return
        device.quiet = 0
        yield from _anomaly_rows(name, device.score(None, self.settings))
        yield from _window_rows(name, device.windows.flush())
        self.state.update(device.dump())

    def _new_readings(self, rows: Iterable[Row]) -> list[Row]:
        """The rows whose id this device has not had in the last `dedupe`; records the ids."""
        by_bucket = _by_bucket(rows, "ts_ms")
        stored = {bucket: self.seen_ids.getValue((bucket,)) for bucket in by_bucket}
        return self._record_new(by_bucket, stored)

    def _new_quarantined(self, rows: Iterable[Row]) -> list[Row]:
        """The same for the quarantine, by arrival: a redelivery arrives in a later bucket,
        so every bucket is read."""
        by_bucket = _by_bucket(rows, "received_ms")
        stored = {key[0]: value for key, value in self.seen_ids.iterator()}
        return self._record_new(by_bucket, stored)

    def _record_new(
        self, by_bucket: dict[int, list[Row]], stored: Mapping[int, tuple[Any, ...] | None]
    ) -> list[Row]:
        """The rows whose id no stored bucket holds, first of their id; adds them to
        their buckets (`stored`: bucket -> (ids,), every bucket a known id may be in)."""
        known = {i for value in stored.values() if value for i in value[0]}
        new: list[Row] = []
        for bucket, rows in by_bucket.items():
            value = stored.get(bucket)
            ids = list(value[0]) if value else []
            had = len(ids)
            for row in rows:
                if row.id not in known:
                    known.add(row.id)
                    ids.append(row.id)
                    new.append(row)
            if len(ids) > had:  # (an update also restarts the bucket's time to live)
                self.seen_ids.updateValue((bucket,), (ids,))
        return new

    def _arm(self, device: Device, now_ms: int) -> None:
        device.timer_ms = now_ms + self.settings.idle_close_ms // 2
        self.handle.registerTimer(device.timer_ms)
