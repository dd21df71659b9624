"""The stack's compiled Prometheus configuration and rules, run by Debian's real `prometheus`
against a real router mesh: every router target is up, and the recording rule's
per-address rate is what a client sent."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from enmesh.compile import monitoring
from tests.router.test_metrics import send
from tests.support.mesh import Mesh, build_mesh, wait_until
from tests.support.prometheus import PROMETHEUS, run_prometheus

pytestmark = pytest.mark.skipif(PROMETHEUS is None, reason="Debian's prometheus is not installed")
ADDRESS = "iot/telemetry"


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    running = build_mesh(tmp_path_factory.mktemp("prom-mesh"), routers=2)
    try:
        running.start()
        running.wait_converged()
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def prometheus(mesh: Mesh) -> Iterator[str]:
    with run_prometheus(mesh) as url:
        yield url


def api(base: str, path: str, **params: Any) -> Any:
    url = f"{base}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())["data"]


def value(base: str, query: str, **params: Any) -> tuple[float, float] | None:
    found = api(base, "query", query=query, **params)["result"]
    return (float(found[0]["value"][0]), float(found[0]["value"][1])) if found else None


def test_compiled_config_and_rules_pass_promtool(mesh: Mesh) -> None:
    promtool = shutil.which("promtool")
    assert promtool is not None
    config = mesh.directory / "config"
    for command, path in (("rules", monitoring.RULES_FILE), ("config", monitoring.CONFIG_FILE)):
        result = subprocess.run(
            [promtool, "check", command, str(config / path)],
            check=False,
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, result.stdout + result.stderr


def test_every_router_is_up_and_the_address_rate_is_what_was_sent(
    mesh: Mesh, prometheus: str
) -> None:
    def routers_up() -> bool:
        up = api(prometheus, "query", query='up{job="enmesh-router"}')["result"]
        return len(up) == len(mesh.routers) and all(r["value"][1] == "1" for r in up)

    wait_until(routers_up, 30, "every router target to be up")
    counter = f'enmesh_address_deliveries_total{{address="{ADDRESS}",direction="in",peer="client"}}'
    # The address's series exists before any message (stable series): a baseline.
    wait_until(lambda: value(prometheus, f"sum({counter})") is not None, 30, "the baseline")
    wait_until(
        lambda: (value(prometheus, f"min(count_over_time({counter}[1m]))") or (0, 0))[1] >= 20,
        60,
        "20 s of samples before the messages, so rate() has a full window to work with",
    )
    baseline = value(prometheus, f"sum({counter})")
    assert baseline is not None
    total = 120
    send(mesh, total, producer_at=0, consumer_at=1)
    wait_until(
        lambda: (value(prometheus, f"sum({counter})") or (0, -1))[1] == baseline[1] + total,
        30,
        f"Prometheus to have scraped {total} more ingress",
    )
    rule = f'enmesh:address_ingress:rate1m{{address="{ADDRESS}"}}'
    wait_until(lambda: (value(prometheus, rule) or (0, 0))[1] > 0, 30, "the recorded rate")
    recorded = value(prometheus, rule)
    assert recorded is not None
    # Over its one-minute window the recorded rate accounts for what the client sent;
    # rate() extrapolates to the window's edges by at most a scrape interval (1 s) on
    # each side of the >= 20 s of samples it has, so within a quarter.
    assert total * 0.8 <= recorded[1] * 60 <= total * 1.25
