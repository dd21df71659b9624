"""`enmesh status` against the running stack: every probe up, Prometheus and Spark included."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.mesh import wait_until

ROOT = Path(__file__).resolve().parents[2]


def _status(stack: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "enmesh.cli", "status", "--stack", stack, "--project-dir", ROOT],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_status_probes_prometheus_and_spark(
    deployment: dict[str, Any], endpoints: dict[str, Any]
) -> None:
    last: list[subprocess.CompletedProcess[str]] = []

    def healthy() -> bool:
        last[:] = [_status(deployment["stack"])]
        return last[0].returncode == 0

    # A broker another test restarted is down for Prometheus until its next scrape (15 s).
    try:
        wait_until(healthy, 90, "enmesh status to report the stack healthy", interval=5)
    except TimeoutError:
        raise AssertionError(last[0].stdout + last[0].stderr) from None
    out = last[0].stdout
    if deployment.get("monitoring"):
        assert "up    prometheus" in out and " targets up" in out, out
    # The e2e stack runs the pipeline (test_pipeline.py): the spark role recorded it.
    assert [s["job"] for s in endpoints["spark"]] == ["enmesh-telemetry"], endpoints
    for probe in ("spark master", "spark worker", "spark job"):
        assert f"up    {probe}" in out, out


def test_status_probes_every_mqtt_gateway_listener(
    deployment: dict[str, Any], endpoints: dict[str, Any]
) -> None:
    # The mqtt_gateway role recorded each host's listeners for endpoints.json.
    urls = [url for gateway in endpoints["mqtt"] for url in gateway["urls"]]
    assert any(url.startswith("mqtt://") for url in urls), endpoints["mqtt"]
    assert any(url.startswith("mqtts://") for url in urls), endpoints["mqtt"]
    result = _status(deployment["stack"])
    for url in urls:
        line = next((x for x in result.stdout.splitlines() if f" {url} " in x), "")
        assert line.startswith("  up    mqtt gateway"), result.stdout


def test_status_probes_the_console(deployment: dict[str, Any], endpoints: dict[str, Any]) -> None:
    # The console role recorded its URL for endpoints.json.
    settings = deployment["console"]
    assert endpoints["console"] == f"https://{settings['host']}:{settings['port']}/"
    result = _status(deployment["stack"])
    line = next((x for x in result.stdout.splitlines() if f" {endpoints['console']} " in x), "")
    assert line.startswith("  up    console"), result.stdout
