"""What the report's charts show (issue 29, item 11): whole-number count axes, totals and
the time range on the summary, windows drawn only where there are readings, humidity."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib.dates import date2num

from enmesh_spark.report import device_figure, load, render_report, summary_figure
from tests.spark.test_report import START, _readings, _table, _windows


@pytest.fixture(scope="module")
def late_start(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Readings from 40 s into their first minute: the first window starts 40 s early."""
    out = tmp_path_factory.mktemp("late")
    readings = _readings("dev-a", START + timedelta(seconds=40), 30, 20.0)
    _table(out / "readings", readings)
    _table(out / "windows_tumbling", _windows(readings))
    quarantined = {"id": "q", "body": "{", "reason": "not json", "received_time": START}
    _table(out / "quarantine", [quarantined])
    return out


def _line(fig: Any, label: str) -> Any:
    return next(line for ax in fig.axes for line in ax.get_lines() if line.get_label() == label)


def test_windows_start_with_the_first_reading(late_start: Path) -> None:
    fig = device_figure("dev-a", load(late_start))
    first_reading = date2num(START + timedelta(seconds=40))
    mean_x = _line(fig, "1 min mean").get_xdata(orig=False)
    assert min(mean_x) == pytest.approx(first_reading)
    assert max(mean_x) <= max(_line(fig, "reading").get_xdata(orig=False))


def test_humidity_is_plotted_on_its_own_axis(late_start: Path) -> None:
    fig = device_figure("dev-a", load(late_start))
    humidity = _line(fig, "humidity")
    assert humidity.axes.get_ylabel() == "humidity (%)"
    assert np.nanmax(humidity.get_ydata()) == 40.0
    legend = fig.axes[0].get_legend()
    assert "humidity" in [text.get_text() for text in legend.get_texts()]


def test_summary_has_totals_time_range_and_whole_number_axes(
    late_start: Path, tmp_path: Path
) -> None:
    render_report(late_start, tmp_path)
    index = json.loads((tmp_path / "index.json").read_text())
    assert index["totals"] == {"readings": 30, "anomalies": 0, "quarantined": 1}
    assert index["time_range"] == {"first": "2026-01-01 00:00:40", "last": "2026-01-01 00:03:05"}
    fig = summary_figure(index)
    assert "30 readings, 0 anomalies, 1 quarantined; 2026-01-01 00:00:40 to" in (fig.get_suptitle())
    for ax in fig.axes:
        ticks = ax.get_yticks()
        assert np.all(ticks == np.round(ticks)), (ax.get_title(), ticks)
    anomalies = next(ax for ax in fig.axes if ax.get_title() == "anomalies")
    assert list(anomalies.get_xticks()) == [0]  # one bar, dev-a; no -0.04 ... 0.04 when empty
    empty = summary_figure({**index, "quarantine": {}})
    quarantine = next(ax for ax in empty.axes if ax.get_title().startswith("quarantined"))
    assert list(quarantine.get_xticks()) == []
