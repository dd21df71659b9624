"""Two listeners of a stack on one host and port: `enmesh render` refuses the stack and
names both (components and the stack-file fields that gave them the port), instead of the
second failing with "address already in use" after the first was deployed. And the MQTT
gateway's ports and switch come from the stack file into deploy.json."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.unit.test_cli import ROOT, run

LOCAL = ROOT / "stacks" / "local.stack.yml"


def _stack(tmp_path: Path, **spec: object) -> Path:
    """The local stack with `spec` entries replaced, its model found by absolute path."""
    document = yaml.safe_load(LOCAL.read_text())
    document["spec"]["models"] = [str(ROOT / "stacks" / "iot.model.yml")]
    document["spec"].update(spec)
    path = tmp_path / "test.stack.yml"
    path.write_text(yaml.safe_dump(document))
    return path


def _render(stack: Path, out: Path) -> tuple[int, str]:
    result = run("render", "--stack", stack, "--out", out)
    return result.returncode, result.stderr


def test_routers_sharing_a_host_with_too_small_a_stride(tmp_path: Path) -> None:
    routers = yaml.safe_load(LOCAL.read_text())["spec"]["routers"]
    routers["ports"]["stride"] = 1  # router 1's amqps (5671 + 1) is router 0's amqp
    code, err = _render(_stack(tmp_path, routers=routers), tmp_path / "out")
    assert code == 1
    assert (
        "port 5672 on 127.0.0.1: router local-router-0 amqp (spec.routers.ports.amqp) "
        "and router local-router-1 amqps (spec.routers.ports.amqps)"
    ) in err
    assert not (tmp_path / "out").exists()  # nothing written


def test_mqtt_gateway_on_a_router_port_and_prometheus_on_a_metrics_port(tmp_path: Path) -> None:
    stack = _stack(
        tmp_path,
        mqtt={"ports": {"mqtt": 5672}},
        monitoring={"prometheus": {"port": 9100}},  # router 1's metrics (9090 + stride 10)
    )
    code, err = _render(stack, tmp_path / "out")
    assert code == 1
    assert (
        "port 5672 on 127.0.0.1: router local-router-0 amqp (spec.routers.ports.amqp) "
        "and MQTT gateway on 127.0.0.1 mqtt (spec.mqtt.ports.mqtt)"
    ) in err
    assert (
        "port 9100 on 127.0.0.1: router local-router-1 metrics (spec.routers.ports.metrics) "
        "and prometheus (spec.monitoring.prometheus.port)"
    ) in err


def test_a_disabled_gateway_takes_no_port_and_deploy_json_says_so(tmp_path: Path) -> None:
    stack = _stack(tmp_path, mqtt={"enabled": False, "ports": {"mqtt": 5672}})
    code, err = _render(stack, tmp_path / "out")
    assert code == 0, err
    deployment = json.loads((tmp_path / "out" / "deploy.json").read_text())
    assert deployment["mqtt"]["enabled"] is False


def test_gateway_ports_reach_deploy_json(tmp_path: Path) -> None:
    ports = {"mqtt": 11883, "mqtts": 18883, "ws": 0, "wss": 18084}
    code, err = _render(_stack(tmp_path, mqtt={"ports": ports}), tmp_path / "out")
    assert code == 0, err
    deployment = json.loads((tmp_path / "out" / "deploy.json").read_text())
    assert deployment["mqtt"] == {"enabled": True, "ports": ports}


def test_an_enabled_gateway_without_any_port_is_refused_at_the_field(tmp_path: Path) -> None:
    zero = {"mqtt": 0, "mqtts": 0, "ws": 0, "wss": 0}
    code, err = _render(_stack(tmp_path, mqtt={"ports": zero}), tmp_path / "out")
    assert code == 1
    assert "spec.mqtt: an enabled MQTT gateway needs at least one port other than 0" in err
