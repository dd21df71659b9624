"""The smoke check's MQTT step against the real gateway in front of a real router: a
QoS 1 message from one model user to another through the gateway's TLS listener; a
gateway that cannot be reached from the deployer is skipped, one that is down fails
with where and why."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from enmesh.deploy.smoke import Skipped, SmokeError, Stack
from enmesh.deploy.smoke_mqtt import mqtt_checks
from tests.mqtt.conftest import GatewayProcess
from tests.support.mesh import Mesh
from tests.support.ports import free_port


def _stack(mesh: Mesh, build: Path, urls: list[str], router_host: str = "127.0.0.1") -> Stack:
    """The mesh as the deployer sees it, with endpoints.json naming one gateway."""
    config = mesh.directory / "config"
    deployment: dict[str, Any] = json.loads((config / "deploy.json").read_text())
    for router in deployment["routers"]:
        router["host"] = router_host
    shutil.copytree(config / "auth", build / "auth", dirs_exist_ok=True)
    endpoints = {"mqtt": [{"host": "gateway-host", "urls": urls}]}
    (build / "endpoints.json").write_text(json.dumps(endpoints))
    return Stack(deployment, build, mesh.secrets_dir, mesh.ca)


def test_a_message_goes_through_the_gateway_to_a_subscriber(
    mqtt_mesh: Mesh, gateway: GatewayProcess, tmp_path: Path
) -> None:
    urls = [f"{kind}://127.0.0.1:{port}" for kind, port in sorted(gateway.ports.items())]
    checks = list(mqtt_checks(_stack(mqtt_mesh, tmp_path, urls)))
    assert {(c.kind, c.space, c.address) for c in checks} == {
        ("mqtt", "iot", "telemetry"),
        ("mqtt", "acme", "telemetry"),
    }
    for check in checks:  # each space's own users, over TLS
        assert check.run().startswith(f"QoS 1 through mqtts://127.0.0.1:{gateway.ports['mqtts']}")


def test_a_loopback_gateway_of_remote_routers_is_skipped(
    mqtt_mesh: Mesh, gateway: GatewayProcess, tmp_path: Path
) -> None:
    urls = [f"mqtt://127.0.0.1:{gateway.port}"]
    stack = _stack(mqtt_mesh, tmp_path, urls, router_host="192.0.2.10")
    check = next(iter(mqtt_checks(stack)))
    with pytest.raises(Skipped, match=r"listens on 127\.0\.0\.1 only"):
        check.run()


def test_a_gateway_that_is_down_fails_saying_where(mqtt_mesh: Mesh, tmp_path: Path) -> None:
    port = free_port()
    check = next(iter(mqtt_checks(_stack(mqtt_mesh, tmp_path, [f"mqtt://127.0.0.1:{port}"]))))
    with pytest.raises(SmokeError, match=rf"at 127\.0\.0\.1:{port}: cannot connect"):
        check.run()
