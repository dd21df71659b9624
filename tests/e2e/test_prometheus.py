"""The stack's Prometheus, checked through its HTTP API: it runs, every router and broker
it was told to scrape is up, and the compiled recording rules produce series."""

from __future__ import annotations

import json
import re
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.support.mesh import wait_until

PROGRAM = "enmesh-prometheus"
WILDCARDS = {"0.0.0.0", "::", "[::]"}
_DURATION = re.compile(r"^(\d+)(ms|s|m|h)$")
_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}


@pytest.fixture(scope="module")
def monitoring(deployment: dict[str, Any]) -> dict[str, Any]:
    if deployment.get("monitoring") is None:
        pytest.skip("the stack file disables Prometheus (spec.monitoring.prometheus.enabled)")
    return dict(deployment["monitoring"])


@pytest.fixture(scope="module")
def base_url(monitoring: dict[str, Any]) -> str:
    return f"http://{monitoring['host']}:{monitoring['port']}"


@pytest.fixture(scope="module")
def scrape_config(monitoring: dict[str, Any], build_dir: Path) -> dict[str, Any]:
    """The compiled prometheus.yml the role installed (JSON, like every artefact)."""
    return dict(json.loads((build_dir / monitoring["config"]).read_text()))


@pytest.fixture(scope="module")
def interval(scrape_config: dict[str, Any]) -> float:
    """Seconds between scrapes (and rule evaluations): the compiled global interval."""
    text = scrape_config["global"]["scrape_interval"]
    match = _DURATION.match(text)
    assert match, f"scrape_interval {text!r}"
    return int(match[1]) * _SECONDS[match[2]]


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def _query(base_url: str, query: str) -> list[dict[str, Any]]:
    found = _get(f"{base_url}/api/v1/query?{urllib.parse.urlencode({'query': query})}")
    assert found["status"] == "success", found
    return list(found["data"]["result"])


def test_prometheus_runs_under_supervisord_on_its_address(
    host: Any, monitoring: dict[str, Any], base_url: str
) -> None:
    program = host.supervisor(PROGRAM)
    assert program.is_running, f"{PROGRAM}: {program.status}"
    listening = host.socket.get_listening_sockets()
    assert f"tcp://{monitoring['host']}:{monitoring['port']}" in listening
    port = str(monitoring["port"])
    wildcard = [
        s
        for s in listening
        if s.rsplit(":", 1)[1] == port and s.split("//", 1)[1].rsplit(":", 1)[0] in WILDCARDS
    ]
    assert not wildcard, f"Prometheus listens on every interface: {wildcard}"
    with urllib.request.urlopen(f"{base_url}/-/ready", timeout=10) as response:
        assert response.status == 200


def _expected_targets(scrape_config: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        (job["job_name"], target)
        for job in scrape_config["scrape_configs"]
        for group in job["static_configs"]
        for target in group["targets"]
    }


def test_every_router_and_broker_target_is_up(
    deployment: dict[str, Any], scrape_config: dict[str, Any], base_url: str, interval: float
) -> None:
    expected = _expected_targets(scrape_config)
    # The configuration names every router's metrics port and every broker's Prometheus port.
    instances = {instance for _, instance in expected}
    assert {f"{r['host']}:{r['ports']['metrics']}" for r in deployment["routers"]} <= instances
    assert {f"{b['host']}:{b['ports']['prometheus']}" for b in deployment["brokers"]} <= instances
    seen: dict[tuple[str, str], str] = {}

    def all_up() -> bool:
        seen.clear()
        for series in _query(base_url, "up"):
            labels = series["metric"]
            seen[(labels["job"], labels["instance"])] = series["value"][1]
        return all(seen.get(target) == "1" for target in expected)

    # A target's first scrape comes within one interval of Prometheus's start; a broker
    # restarted by an earlier test answers again within a few.
    try:
        wait_until(all_up, 4 * interval + 30, "every target's up == 1", interval=1)
    except TimeoutError:
        not_up = {f"{job} {instance}": seen.get((job, instance)) for job, instance in expected}
        pytest.fail(f"targets not up (job instance: up): {not_up}")
    assert set(seen) >= expected


def test_recording_rules_produce_series_per_router_and_address(
    deployment: dict[str, Any], base_url: str, interval: float
) -> None:
    routers = {r["id"] for r in deployment["routers"]}
    anycast = {
        f"{a['space']}/{a['link']}" for a in deployment["addresses"] if a["type"] == "anycast"
    }

    def labels(query: str, name: str) -> set[str]:
        return {s["metric"].get(name, "") for s in _query(base_url, query)}

    # rate() over 1m needs two samples, then one evaluation: within three intervals of the
    # second scrape.
    wait_until(
        lambda: labels("enmesh:router_ingress:rate1m", "router") >= routers,
        60 + 4 * interval,
        f"enmesh:router_ingress:rate1m for every router ({sorted(routers)})",
        interval=1,
    )
    # Every configured address has series from the start, so its rate is recorded (0 when
    # idle) without any traffic.
    recorded = labels("enmesh:address_ingress:rate1m", "address")
    assert anycast and anycast <= recorded, f"recorded: {sorted(recorded)}"
