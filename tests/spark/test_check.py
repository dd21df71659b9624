"""The job's first step on real Spark: each unusable record gets the reason it is
quarantined, and a usable one gets its fields."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from enmesh_spark import telemetry

RECEIVED = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
RECEIVED_MS = int(RECEIVED.timestamp() * 1000)
SKEW_MS = 300_000


def _reading(**fields: Any) -> str:
    return json.dumps(
        {"device": "d1", "ts": RECEIVED_MS, "metrics": {"temperature": 21.5}} | fields
    )


BODIES = {
    "good": _reading(),
    "at the skew limit": _reading(ts=RECEIVED_MS + SKEW_MS),
    "not json": "{device: d1",
    "no device": json.dumps({"ts": RECEIVED_MS, "metrics": {"temperature": 21.5}}),
    "no timestamp": json.dumps({"device": "d1", "metrics": {"temperature": 21.5}}),
    "no temperature": _reading(metrics={"humidity": 40.0}),
    "not a number": _reading(metrics={"temperature": "hot"}),
    "ahead of arrival": _reading(ts=RECEIVED_MS + SKEW_MS + 1),
}


@pytest.fixture(scope="module")
def checked() -> Iterator[dict[str, dict[str, Any]]]:
    spark = telemetry.session("enmesh-test-check", "local[1]")
    try:
        messages = spark.createDataFrame(
            [(name, body, RECEIVED) for name, body in BODIES.items()]
            + [(None, BODIES["good"], RECEIVED)] * 2,
            "id string, body string, received_time timestamp",
        )
        rows = telemetry.check(messages, SKEW_MS).collect()
        yield {row["id"]: row.asDict() for row in rows}
    finally:
        spark.stop()


def test_each_unusable_record_gets_its_reason(checked: dict[str, dict[str, Any]]) -> None:
    reasons = {name: row["reason"] for name, row in checked.items() if name in BODIES}
    assert reasons == {
        "good": None,
        "at the skew limit": None,
        "not json": "not json",
        "no device": "no device",
        "no timestamp": "no timestamp",
        "no temperature": "no temperature",
        "not a number": "temperature not a number",
        "ahead of arrival": "timestamp in the future",
    }


def test_a_usable_record_gets_its_fields(checked: dict[str, dict[str, Any]]) -> None:
    good = checked["good"]
    assert (good["device"], good["ts_ms"], good["temperature"]) == ("d1", RECEIVED_MS, 21.5)
    assert good["received_ms"] == RECEIVED_MS


def test_a_message_without_an_id_gets_one_of_its_own(checked: dict[str, dict[str, Any]]) -> None:
    generated = [row for name, row in checked.items() if name not in BODIES]
    assert len(generated) == 2  # two different ids
    assert all(row["id"] and row["reason"] is None for row in generated)
