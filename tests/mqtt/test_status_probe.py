"""`enmesh status`'s MQTT probe against the real gateway (in front of a real router): a
listener that serves MQTT answers the credential-less CONNECT itself, over TCP and TLS;
anything else is reported down with what was seen; the routers never see a login."""

from __future__ import annotations

import re

from enmesh.deploy import mqtt_probe
from enmesh.deploy.observability import describe_lines, mqtt_gateway
from tests.mqtt.conftest import GatewayProcess
from tests.support.mesh import Mesh
from tests.support.ports import free_port


def _auth_failures(mesh: Mesh) -> int:
    text = mesh.routers[0].metrics()
    found = re.findall(r"^enmesh_router_auth_failures_total\S* (\S+)$", text, re.M)
    assert found, "the router reports failed logins"
    return sum(int(float(value)) for value in found)


def test_a_live_gateway_is_up_over_tcp_and_tls(mqtt_mesh: Mesh, gateway: GatewayProcess) -> None:
    failures_before = _auth_failures(mqtt_mesh)
    entry = {
        "host": "gateway-host",
        "urls": [f"{kind}://127.0.0.1:{port}" for kind, port in sorted(gateway.ports.items())],
    }
    probes = mqtt_gateway(entry, mqtt_mesh.ca)
    assert [(p.where, p.ok) for p in probes] == [(url, True) for url in entry["urls"]]
    details = {p.where.split(":", 1)[0]: p.detail for p in probes}
    assert details["mqtt"] == details["mqtts"] == "answers MQTT (CONNACK)"
    assert _auth_failures(mqtt_mesh) == failures_before  # answered by the gateway alone


def test_a_listener_that_is_not_mqtt_or_not_there_is_down(
    mqtt_mesh: Mesh, gateway: GatewayProcess
) -> None:
    amqp = mqtt_mesh.routers[0].amqp_port
    ok, detail = mqtt_probe.probe(f"mqtt://127.0.0.1:{amqp}", None)
    assert not ok and detail.startswith("no CONNACK: got "), detail  # AMQP answers otherwise
    ok, detail = mqtt_probe.probe(f"mqtt://127.0.0.1:{free_port()}", None)
    assert not ok and detail.startswith("unreachable: "), detail
    # TLS checked against the stack's CA: without it, the gateway's certificate is unknown.
    ok, detail = mqtt_probe.probe(f"mqtts://127.0.0.1:{gateway.ports['mqtts']}", None)
    assert not ok and "CERTIFICATE_VERIFY_FAILED" in detail, detail


def test_the_endpoints_block_lists_each_gateway_listener() -> None:
    deployment = {"routers": [], "brokers": [], "monitoring": None}
    urls = ["mqtt://127.0.0.1:1883", "mqtts://127.0.0.1:8883", "wss://127.0.0.1:8084"]
    lines = describe_lines(deployment, {"mqtt": [{"host": "local", "urls": urls}]})
    start = next(i for i, line in enumerate(lines) if line.startswith("MQTT gateway on local"))
    assert lines[start + 1 : start + 4] == [f"  {url}" for url in urls]
