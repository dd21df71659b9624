"""The output tables of one micro-batch, cut from the device step's rows (pyarrow, on the
driver): readings, anomalies, quarantine, windows_tumbling, windows_sliding."""

from __future__ import annotations

from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc

TIMESTAMP = pa.timestamp("us", tz="UTC")
TABLES = ("readings", "anomalies", "quarantine", "windows_tumbling", "windows_sliding")
READING_COLUMNS = (
    "id", "device", "ts", "temperature", "humidity", "received_time", "processed_time", "late"
)  # fmt: skip
WINDOW_COLUMNS = ("device", "window_start", "window_end", "count", "mean", "min", "max", "p95")


def _time(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """Milliseconds since the epoch -> a UTC timestamp (what Spark writes)."""
    return pc.multiply(column, 1000).cast(TIMESTAMP)


def _date(column: pa.ChunkedArray) -> pa.ChunkedArray:
    return pc.floor_temporal(column, unit="day").cast(pa.date32())


def _with_times(rows: pa.Table, **times: str) -> pa.Table:
    for name, source in times.items():
        rows = rows.append_column(name, _time(rows[source]))
    return rows


def _select(rows: pa.Table, columns: tuple[str, ...], date_of: str) -> pa.Table:
    return rows.select(list(columns)).append_column("date", _date(rows[date_of]))


def of_batch(output: pa.Table, processed: datetime) -> dict[str, pa.Table]:
    """Table name -> its rows (each with `date`, the partition). Times are UTC."""
    kind = output["kind"]
    readings = _with_times(
        output.filter(pc.equal(kind, "reading")), ts="ts_ms", received_time="received_ms"
    )
    readings = readings.append_column(
        "processed_time", pa.array([processed] * readings.num_rows, TIMESTAMP)
    )
    quarantine = _with_times(
        output.filter(pc.equal(kind, "quarantine")), received_time="received_ms"
    )
    tables = {
        "readings": _select(readings, READING_COLUMNS, "ts"),
        "anomalies": _select(
            _with_times(output.filter(pc.equal(kind, "anomaly")), ts="ts_ms"),
            ("id", "device", "ts", "temperature", "baseline_mean", "baseline_std", "z"),
            "ts",
        ),
        "quarantine": _select(
            quarantine, ("id", "body", "reason", "received_time"), "received_time"
        ),
    }
    for name in ("tumbling", "sliding"):
        windows = _with_times(
            output.filter(pc.equal(kind, name)),
            window_start="window_start_ms",
            window_end="window_end_ms",
        )
        tables[f"windows_{name}"] = _select(windows, WINDOW_COLUMNS, "window_start")
    return tables
