"""The per-device step of the telemetry job, driven by Spark's TwsTester (no cluster):
windows against the simulator's independent aggregates, lateness, silence, anomalies."""

from __future__ import annotations

import random
import statistics
from typing import Any

import pytest
from pyspark.sql import Row
from pyspark.sql.streaming.tws_tester import TwsTester

from enmesh_spark.device_state import DeviceProcessor, Settings, _mean_and_std
from enmesh_spark.simulator import Reading, expected_anomalies, expected_windows, generate
from tests.support.windows import assert_windows_match

DEVICE = "dev-0000"


def _tester(**settings: Any) -> TwsTester:
    processor = DeviceProcessor(Settings(idle_close_ms=2000, **settings))
    return TwsTester(processor, timeMode="ProcessingTime")


def _input(reading: Reading) -> Row:
    return Row(
        device=reading.device, id=reading.id, ts_ms=reading.ts_ms,
        temperature=reading.temperature, humidity=40.0, received_ms=0, body=reading.body,
        reason=reading.reason,
    )  # fmt: skip


def _readings(seed: int = 1, duration: float = 400, spikes: float = 0.0) -> list[Reading]:
    generated = generate(seed=seed, devices=1, rate=1, duration=duration, spikes=spikes)
    return [r for r in generated if r.temperature is not None]


def _feed(tester: TwsTester, readings: list[Reading], batch: int = 50) -> list[Row]:
    out: list[Row] = []
    for i in range(0, len(readings), batch):
        out += tester.test(DEVICE, [_input(r) for r in readings[i : i + batch]])
    return out


def _emitted(rows: list[Row], kind: str) -> list[tuple[tuple[str, int], Row]]:
    return [((row.device, row.window_start_ms), row) for row in rows if row.kind == kind]


def _windows(rows: list[Row], kind: str) -> dict[tuple[str, int], Row]:
    emitted = _emitted(rows, kind)
    windows = dict(emitted)
    assert len(windows) == len(emitted), f"a {kind} window emitted twice"
    return windows


def _assert_match(rows: list[Row], readings: list[Reading]) -> None:
    assert_windows_match(lambda kind: _emitted(rows, kind), readings)


def _silence(tester: TwsTester, now_ms: int) -> list[Row]:
    """Three expiries of the silence timer (each half of idle_close)."""
    return [row for step in (1, 2, 3) for row in tester.setProcessingTime(now_ms + step * 1000)]


def test_windows_close_by_event_time_then_silence_with_exact_aggregates() -> None:
    readings = _readings()
    tester = _tester()
    rows = _feed(tester, readings)
    # event time closed every window that ended 10 s before the last reading
    last = readings[-1].ts_ms
    closed = {k for k, w in _windows(rows, "tumbling").items() if w.window_end_ms <= last - 10_000}
    assert closed == set(_windows(rows, "tumbling"))
    assert len(closed) == len(expected_windows(readings)) - 1  # the last minute is open
    rows += _silence(tester, 0)
    _assert_match(rows, readings)


def test_a_reading_in_a_closed_window_is_late_and_counted_in_no_window() -> None:
    readings = _readings(duration=200)
    tester = _tester()
    rows = _feed(tester, readings)
    stale = Reading("old", DEVICE, readings[0].ts_ms, "{}", readings[0].temperature, False, None)
    (late,) = tester.test(DEVICE, [_input(stale)])
    assert late.kind == "reading" and late.late
    rows += _silence(tester, 0)
    _assert_match(rows, readings)  # the windows hold exactly the readings that were on time


def test_a_new_devices_readings_delivered_after_a_later_one_count_within_lateness() -> None:
    readings = _readings(duration=200)  # one a second from a minute's start
    tester = _tester(lateness_ms=120_000)
    # the mesh delivers the reading of second 70 first, then the minute before it
    first = readings[70]
    rows = tester.test(DEVICE, [_input(first)])
    rows += _feed(tester, [r for r in readings if r is not first])
    rows += _silence(tester, 0)
    assert not [row.id for row in rows if row.kind == "reading" and row.late]
    _assert_match(rows, readings)


def test_silence_needs_three_expiries_with_no_reading_since_the_first() -> None:
    readings = _readings(duration=200)
    tester = _tester()
    rows = _feed(tester, readings[:100])
    # the timer fires (e.g. at the start of a slow batch), then the device's readings come
    assert tester.setProcessingTime(1000) == []
    rows += tester.test(DEVICE, [_input(r) for r in readings[100:]])
    # the readings did not move the timer: it fires half an idle close after the last
    # expiry, and the last reading may have come just before it
    assert tester.setProcessingTime(2000) == []
    assert tester.setProcessingTime(3000) == []  # one idle close: not silent yet
    rows += tester.setProcessingTime(4000)
    _assert_match(rows, readings)


def test_a_timer_that_fires_late_observed_no_silence() -> None:
    readings = _readings(duration=200)
    tester = _tester()
    rows = _feed(tester, readings)
    # the job was down: the first expiry comes 30 s late, then two on time are not enough
    assert tester.setProcessingTime(31_000) == []
    assert tester.setProcessingTime(32_000) == []
    assert tester.setProcessingTime(33_000) == []
    rows += tester.setProcessingTime(34_000)
    _assert_match(rows, readings)


def test_anomalies_match_the_simulators_rule() -> None:
    readings = _readings(seed=3, duration=600, spikes=0.02)
    shuffled = sorted(readings, key=lambda r: (r.ts_ms // 5000, -r.ts_ms))  # 5 s out of order
    tester = _tester()
    rows = _feed(tester, shuffled, batch=7)
    scored_early = {row.id for row in rows if row.kind == "anomaly"}
    rows += _silence(tester, 0)
    flagged = [row.id for row in rows if row.kind == "anomaly"]
    assert sorted(flagged) == sorted(expected_anomalies(readings))
    assert {r.id for r in readings if r.spike} <= set(flagged)
    assert scored_early  # scored once the device's event time is `lateness` past them


def test_a_redelivered_reading_is_dropped_and_counted_once() -> None:
    readings = _readings(duration=200)
    tester = _tester()
    rows = _feed(tester, readings[:120])
    # redeliveries of readings already counted (ids 30..119) among new readings, and one
    # twice in the same batch
    again = [*readings[30:120], readings[150], *readings[120:]]
    rows += _feed(tester, again, batch=70)
    emitted = [row.id for row in rows if row.kind == "reading"]
    assert sorted(emitted) == sorted(r.id for r in readings)
    rows += _silence(tester, 0)
    _assert_match(rows, readings)


def test_quarantined_records_pass_through_once_without_device_state() -> None:
    tester = _tester()
    bad = Row(
        device=None, id="x", ts_ms=None, temperature=None, humidity=None, received_ms=5,
        body="{", reason="not json",
    )  # fmt: skip
    (row,) = tester.test(None, [bad])
    assert (row.kind, row.id, row.reason, row.body, row.received_ms) == (
        "quarantine", "x", "not json", "{", 5,
    )  # fmt: skip
    assert tester.peekValueState("device", None) is None
    assert tester.test(None, [bad]) == []  # a redelivery
    # redelivered a minute later (another arrival bucket), with a new record
    later = [
        bad.asDict() | {"received_ms": 60_005},
        bad.asDict() | {"id": "y", "received_ms": 60_006},
    ]
    assert [row.id for row in tester.test(None, [Row(**r) for r in later])] == ["y"]


def test_the_baseline_statistics_agree_with_exact_arithmetic() -> None:
    rng = random.Random(3)
    for _ in range(200):
        values = [rng.gauss(rng.uniform(-30, 60), rng.uniform(0.01, 5)) for _ in range(50)]
        mean, std = _mean_and_std(values)
        assert mean == pytest.approx(statistics.fmean(values), rel=1e-12)
        assert std == pytest.approx(statistics.stdev(values), rel=1e-12)
