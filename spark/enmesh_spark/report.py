"""PNG plots of the telemetry job's Parquet output, read with pyarrow (no Spark needed).

One `<device>.png` per device (readings, 1 min tumbling mean and p95, anomalies in red),
a `summary.png` (readings and anomalies per device, quarantined records per reason) and an
`index.json` listing what was written, written last so that its presence means a complete
report.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt
import pyarrow.compute as pc
import pyarrow.parquet as pq
from matplotlib.axes import Axes
from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from enmesh_spark.options import report_arguments, report_directories

Table = Any  # a pyarrow.Table: pyarrow ships no type information
READING_STYLE: dict[str, Any] = {"color": "tab:blue", "linewidth": 0.8, "label": "reading"}
# pure red, used for nothing else: the tests look for it
ANOMALY_STYLE: dict[str, Any] = {
    "color": "#ff0000", "linestyle": "none", "marker": "o", "markersize": 8, "zorder": 3,
    "label": "anomaly",
}  # fmt: skip
FIGSIZE, DPI = (10.0, 4.0), 100
KNOWN_SHOWN = 10


class ReportError(Exception):
    """The pipeline output cannot produce the report asked for."""


@dataclass(frozen=True)
class Tables:
    readings: Table
    anomalies: Table | None
    windows: Table | None  # tumbling
    quarantine: Table | None


def _read(out: Path, name: str, columns: list[str]) -> Table | None:
    """A table, or None before the job wrote its first row (Spark leaves only `_SUCCESS`)."""
    path = out / name
    return pq.read_table(path, columns=columns) if any(path.glob("date=*/*.parquet")) else None


def load(out: Path) -> Tables:
    readings = _read(out, "readings", ["device", "ts", "temperature", "humidity"])
    if readings is None:
        raise ReportError(f"no readings under {out / 'readings'}: run the telemetry job first")
    return Tables(
        readings=readings,
        anomalies=_read(out, "anomalies", ["device", "ts", "temperature"]),
        windows=_read(
            out, "windows_tumbling", ["device", "window_start", "window_end", "mean", "p95"]
        ),
        quarantine=_read(out, "quarantine", ["reason"]),
    )


def _counts(table: Table | None, column: str) -> dict[str, int]:
    if table is None:
        return {}
    counts: dict[str, int] = {
        row["values"]: row["counts"]
        for row in pc.value_counts(table[column].drop_null()).to_pylist()
    }
    return dict(sorted(counts.items()))


def _rows(table: Table | None, device: str, order: str) -> Table | None:
    """The device's rows in time order, or None if it has none."""
    rows = None if table is None else table.filter(pc.equal(table["device"], device))
    return rows.sort_by(order) if rows is not None and rows.num_rows else None


def _times(table: Table, column: str) -> npt.NDArray[np.datetime64]:
    # Spark writes INT96 timestamps: naive, in UTC. datetime64 keeps them that way.
    times: npt.NDArray[np.datetime64] = table[column].to_numpy()
    return times


def _candidates(known: Sequence[str], devices: Sequence[str] | None) -> list[str]:
    """The devices to report, before the `max_devices` cut; an unknown one is an error."""
    if devices is None:
        return sorted(known)
    missing = sorted(set(devices) - set(known))
    if missing:
        shown = sorted(known)[:KNOWN_SHOWN] + (["..."] if len(known) > KNOWN_SHOWN else [])
        raise ReportError(
            f"no readings for device {', '.join(missing)}; known devices: {', '.join(shown)}"
        )
    return sorted(set(devices))


def file_name(device: str) -> str:
    """`<device>.png`; a name that is not a plain file name (device ids come from the
    messages) gets its unsafe characters replaced and a hash, so names stay distinct."""
    safe = re.sub(r"[^\w.-]|^\.", "_", device, flags=re.ASCII)[:100]
    if not safe or safe != device or safe == "summary":
        safe += "-" + hashlib.sha256(device.encode()).hexdigest()[:8]
    return f"{safe}.png"


def _plain(text: str) -> str:
    """Device ids come from the messages: `$...$` would be parsed as mathtext (and can fail)."""
    return text.replace("$", r"\$")


def _steps(
    windows: Table, first: np.datetime64, last: np.datetime64
) -> tuple[npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any]]:
    """(x, mean, p95) drawing each window flat over its span, cut to the readings' time
    range [first, last] (a window starts on the minute, its readings maybe much later); a
    gap between windows (a minute without readings) breaks the line instead of bridging it."""
    starts, ends = _times(windows, "window_start"), _times(windows, "window_end")
    starts, ends = np.maximum(starts, first), np.minimum(ends, last)
    x = np.column_stack([starts, ends]).ravel()
    gaps = np.flatnonzero(starts[1:] != ends[:-1]) + 1
    x = np.insert(x, 2 * gaps, ends[gaps - 1])

    def values(column: str) -> npt.NDArray[Any]:
        return np.insert(np.repeat(windows[column].to_numpy(), 2), 2 * gaps, np.nan)

    return x, values("mean"), values("p95")


def _series(ax: Axes, rows: Table | None, column: str = "temperature", **style: Any) -> None:
    if rows is not None:  # an empty plot would still get a legend entry
        ax.plot(_times(rows, "ts"), rows[column].to_numpy(zero_copy_only=False), **style)


def _humidity(ax: Axes, rows: Table | None) -> list[Any]:
    """Humidity on its own axis at the right (another unit); its legend handles."""
    if rows is None or rows["humidity"].null_count == rows.num_rows:
        return []
    right = ax.twinx()
    right.set_ylabel("humidity (%)")
    style = {"color": "tab:cyan", "linewidth": 0.8, "alpha": 0.7, "label": "humidity"}
    _series(right, rows, "humidity", **style)
    return list(right.get_legend_handles_labels()[0])


def _time_axis(ax: Axes) -> None:
    """hh:mm ticks with the date once at the end (matplotlib.dates has no type hints)."""
    locator = AutoDateLocator(tz=UTC)  # type: ignore[no-untyped-call]
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(ConciseDateFormatter(locator, tz=UTC))  # type: ignore[no-untyped-call]


def device_figure(device: str, tables: Tables) -> Figure:
    fig = Figure(figsize=FIGSIZE, dpi=DPI, layout="constrained")
    ax = fig.add_subplot()
    _time_axis(ax)
    readings = _rows(tables.readings, device, "ts")
    _series(ax, readings, **READING_STYLE)
    windows = _rows(tables.windows, device, "window_start")
    if windows is not None and readings is not None:
        times = _times(readings, "ts")
        x, mean, p95 = _steps(windows, times[0], times[-1])
        ax.plot(x, mean, color="tab:green", label="1 min mean")
        ax.plot(x, p95, color="tab:orange", linestyle="--", label="1 min p95")
    _series(ax, _rows(tables.anomalies, device, "ts"), **ANOMALY_STYLE)
    ax.set(title=f"device {_plain(device)}", xlabel="time (UTC)", ylabel="temperature (°C)")
    handles = list(ax.get_legend_handles_labels()[0]) + _humidity(ax, readings)
    ax.legend(handles=handles, loc="upper left")
    return fig


def _bars(ax: Axes, counts: dict[str, int], title: str, colour: str) -> None:
    ax.bar([_plain(key) for key in counts], list(counts.values()), color=colour)
    ax.set_title(title)
    ax.tick_params(axis="x", labelrotation=45)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # counts: no 0.2 steps
    ax.set_ylim(0, max([1, *counts.values()]) * 1.05)  # all zero: 0 to 1, not -0.06 to 0.06
    if not counts:
        ax.text(0.5, 0.5, "none", ha="center", va="center", transform=ax.transAxes)
        ax.set_xticks([])  # no bars: matplotlib would label -0.04 ... 0.04


def summary_figure(index: dict[str, Any]) -> Figure:
    fig = Figure(figsize=(FIGSIZE[0], 2.5 * FIGSIZE[1]), dpi=DPI, layout="constrained")
    readings, anomalies, quarantine = fig.subplots(3, 1)
    devices = index["devices"]
    _bars(readings, {d: c["readings"] for d, c in devices.items()}, "readings", "tab:blue")
    _bars(anomalies, {d: c["anomalies"] for d, c in devices.items()}, "anomalies", "tab:purple")
    _bars(quarantine, index["quarantine"], "quarantined records by reason", "tab:gray")
    omitted = index["devices_omitted"]
    limit = f"; {omitted} more not shown (max devices)" if omitted else ""
    totals, span = index["totals"], index["time_range"]
    fig.suptitle(
        f"enmesh telemetry: {len(devices)} of {index['devices_known']} devices{limit}\n"
        f"{totals['readings']} readings, {totals['anomalies']} anomalies, "
        f"{totals['quarantined']} quarantined; {span['first']} to {span['last']} UTC"
    )
    return fig


def _time_range(readings: Table) -> dict[str, str]:
    times = _times(readings, "ts")
    return {
        edge: str(np.datetime_as_string(value, unit="s")).replace("T", " ")
        for edge, value in (("first", times.min()), ("last", times.max()))
    }


def _write(path: Path, write: Callable[[IO[bytes]], object]) -> None:
    """Write under a temporary name and rename, so no reader sees a half-written file."""
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with temp.open("wb") as file:
            write(file)
        temp.replace(path)
    finally:
        temp.unlink(missing_ok=True)


def _save(fig: Figure, path: Path) -> None:
    _write(path, lambda file: fig.savefig(file, format="png", dpi=DPI))


def render_report(
    out: Path, dest: Path, devices: Sequence[str] | None = None, max_devices: int = 20
) -> list[Path]:
    """Render the report of the pipeline output `out` into `dest`; the paths written."""
    tables = load(out)
    readings, anomalies = _counts(tables.readings, "device"), _counts(tables.anomalies, "device")
    candidates = _candidates(list(readings), devices)
    selected = candidates[:max_devices]
    index: dict[str, Any] = {
        "devices": {
            d: {"file": file_name(d), "readings": readings[d], "anomalies": anomalies.get(d, 0)}
            for d in selected
        },
        "devices_known": len(readings),
        "devices_omitted": len(candidates) - len(selected),  # by max_devices
        "quarantine": _counts(tables.quarantine, "reason"),
        "time_range": _time_range(tables.readings),
    }
    index["totals"] = {
        "readings": sum(readings.values()),
        "anomalies": sum(anomalies.values()),
        "quarantined": sum(index["quarantine"].values()),
    }
    dest.mkdir(parents=True, exist_ok=True)
    written = []
    for device in selected:
        written.append(dest / file_name(device))
        _save(device_figure(device, tables), written[-1])
    written.append(dest / "summary.png")
    _save(summary_figure(index), written[-1])
    index["files"] = [path.name for path in written]
    text = json.dumps(index, indent=2, sort_keys=True) + "\n"
    written.append(dest / "index.json")
    _write(written[-1], lambda file: file.write(text.encode()))
    return written


def run(args: argparse.Namespace) -> int:
    try:
        data, dest, note = report_directories(args)
    except argparse.ArgumentTypeError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if note:
        print(note, file=sys.stderr)
    try:
        written = render_report(data, dest, args.device, args.max_devices)
    except ReportError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for path in written:
        print(path)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="enmesh-report", description=__doc__.splitlines()[0])
    report_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
