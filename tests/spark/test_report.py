"""The report module on a small hand-built pipeline output: no Spark, no network."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from matplotlib.image import imread

from enmesh_spark.report import ReportError, main, render_report

START = datetime(2026, 1, 1)  # naive UTC, as pyarrow reads Spark's INT96 timestamps
SPIKE = 45  # dev-a's reading at 3/4 of its time span; the legend sits at the upper left
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
RED, GREEN = (1.0, 0.0, 0.0), (0.173, 0.627, 0.173)  # anomaly marker, tab:green (the mean)


def _table(root: Path, rows: list[dict[str, Any]]) -> None:
    for row in rows:
        row["date"] = (row.get("ts") or row.get("window_start") or START).date().isoformat()
    pq.write_to_dataset(pa.Table.from_pylist(rows), root, partition_cols=["date"])


def _readings(device: str, start: datetime, count: int, base: float) -> list[dict[str, Any]]:
    return [
        {
            "id": f"{device}-{i}",
            "device": device,
            "ts": start + timedelta(seconds=5 * i),
            "temperature": base + 60.0 if device == "dev-a" and i == SPIKE else base + i % 3 / 10,
            "humidity": 40.0 if i % 4 else None,
        }
        for i in range(count)
    ]


def _windows(readings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    minutes: dict[tuple[str, datetime], list[float]] = {}
    for r in readings:
        minute = r["ts"].replace(second=0)
        minutes.setdefault((r["device"], minute), []).append(r["temperature"])
    return [
        {"device": device, "window_start": start, "window_end": start + timedelta(minutes=1),
         "count": len(values), "mean": sum(values) / len(values), "p95": max(values)}
        for (device, start), values in minutes.items()
    ]  # fmt: skip


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("out")
    # dev-b crosses midnight: its readings sit in two date= partitions
    readings = _readings("dev-a", START, 60, 20.0) + _readings(
        "dev-b", START - timedelta(seconds=30), 40, 22.0
    )
    _table(out / "readings", readings)
    spike = readings[SPIKE]
    _table(out / "anomalies", [{**spike, "baseline_mean": 20.1, "baseline_std": 0.1, "z": 599.0}])
    _table(out / "windows_tumbling", _windows(readings))
    _table(
        out / "quarantine",
        [{"id": f"q{i}", "body": "{", "reason": reason, "received_time": START}
         for i, reason in enumerate(["not json", "not json", "no device"])],
    )  # fmt: skip
    return out


@pytest.fixture(scope="module")
def report(out: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    dest = tmp_path_factory.mktemp("report") / "new"  # created by render_report
    return dest, render_report(out, dest)


def _image(path: Path) -> np.ndarray[Any, Any]:
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    image: np.ndarray[Any, Any] = imread(path)
    return image


def _pixels(
    image: np.ndarray[Any, Any], colour: tuple[float, float, float]
) -> np.ndarray[Any, Any]:
    """(row, column) of the pixels within 0.06 of `colour` in every channel."""
    return np.argwhere(np.all(np.abs(image[:, :, :3] - colour) < 0.06, axis=2))


def test_writes_one_png_per_device_a_summary_and_an_index(report: tuple[Path, list[Path]]) -> None:
    dest, written = report
    names = ["dev-a.png", "dev-b.png", "summary.png", "index.json"]
    assert written == [dest / name for name in names]
    assert sorted(p.name for p in dest.iterdir()) == sorted(names)  # no temporary files left
    assert _image(dest / "dev-a.png").shape == (400, 1000, 4)  # fixed size and DPI
    assert _image(dest / "summary.png").shape == (1000, 1000, 4)
    index = json.loads((dest / "index.json").read_text())
    assert index == {
        "devices": {
            "dev-a": {"anomalies": 1, "file": "dev-a.png", "readings": 60},
            "dev-b": {"anomalies": 0, "file": "dev-b.png", "readings": 40},
        },
        "devices_known": 2,
        "devices_omitted": 0,
        "files": names[:3],
        "quarantine": {"no device": 1, "not json": 2},
        "time_range": {"first": "2025-12-31 23:59:30", "last": "2026-01-01 00:04:55"},
        "totals": {"anomalies": 1, "quarantined": 3, "readings": 100},
    }


def test_the_anomaly_is_marked_in_red_on_its_device_only(report: tuple[Path, list[Path]]) -> None:
    dest, _ = report
    spiky, calm = _image(dest / "dev-a.png"), _image(dest / "dev-b.png")
    red = _pixels(spiky, RED)
    # the marker at the spike, right of the middle, not only the legend's at the upper left
    assert (red[:, 1] > spiky.shape[1] / 2).sum() > 20
    assert len(_pixels(calm, RED)) == 0
    assert len(_pixels(spiky, GREEN)) > 100 and len(_pixels(calm, GREEN)) > 100  # window means


def test_device_selection_and_limit(out: Path, tmp_path: Path) -> None:
    written = render_report(out, tmp_path / "b", devices=["dev-b", "dev-b"])
    assert [p.name for p in written] == ["dev-b.png", "summary.png", "index.json"]
    limited = render_report(out, tmp_path / "limited", max_devices=1)
    assert [p.name for p in limited] == ["dev-a.png", "summary.png", "index.json"]
    index = json.loads(limited[-1].read_text())
    assert (list(index["devices"]), index["devices_known"], index["devices_omitted"]) == (
        ["dev-a"],
        2,
        1,
    )


def test_device_ids_cannot_escape_dest_or_break_the_plot(tmp_path: Path) -> None:
    out, dest = tmp_path / "out", tmp_path / "report"
    devices = ["../x", r"$\frac$", "summary", ""]
    _table(out / "readings", [r for d in devices for r in _readings(d, START, 3, 20.0)])
    written = render_report(out, dest)
    assert {p.parent for p in written} == {dest}
    assert len({p.name for p in written}) == len(devices) + 2
    assert sorted(p.name for p in dest.iterdir()) == sorted(p.name for p in written)


def test_no_readings_names_the_path(tmp_path: Path) -> None:
    (tmp_path / "readings").mkdir()
    (tmp_path / "readings" / "_SUCCESS").touch()  # what Spark leaves of an empty write
    with pytest.raises(ReportError, match="run the telemetry job first") as error:
        render_report(tmp_path, tmp_path / "report")
    assert str(tmp_path / "readings") in str(error.value)


def test_an_unknown_device_is_named_with_the_known_ones(out: Path, tmp_path: Path) -> None:
    with pytest.raises(ReportError) as error:
        render_report(out, tmp_path / "report", devices=["dev-a", "dev-x"])
    assert "dev-x" in str(error.value) and "dev-a, dev-b" in str(error.value)
    assert not (tmp_path / "report").exists()  # checked before anything is written


def test_main_prints_the_files_or_the_error(
    out: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--data", str(tmp_path / "missing")]) == 1
    captured = capsys.readouterr()
    assert captured.err.startswith("error: no readings under") and not captured.out
    assert main(["--data", str(out), "--device", "dev-b"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed == [str(out / "report" / n) for n in ("dev-b.png", "summary.png", "index.json")]


def test_data_is_read_and_out_is_written(
    out: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 29: `--data` is the job's output, `--out` the report (`--dest` its old name)."""
    enmesh = Path(sys.executable).parent / "enmesh"
    names = ("dev-a.png", "summary.png", "index.json")
    dest = tmp_path / "out"
    result = subprocess.run(
        [str(enmesh), "report", "--data", str(out), "--out", str(dest), "--device", "dev-a"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [str(dest / n) for n in names]
    assert result.stderr == ""
    old = tmp_path / "dest"
    assert main(["--data", str(out), "--dest", str(old), "--device", "dev-a"]) == 0
    assert capsys.readouterr().out.splitlines() == [str(old / n) for n in names]


def test_out_alone_keeps_its_old_meaning_with_a_note(
    out: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--out", str(out), "--device", "dev-b"]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines()[0] == str(out / "report" / "dev-b.png")
    assert f"say --data {out}" in captured.err


def test_no_data_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "needs --data DIR" in capsys.readouterr().err
