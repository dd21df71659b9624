"""MQTT over TLS (the stack's CA) and over WebSocket, plain and TLS."""

from __future__ import annotations

from typing import Any

import pytest

from tests.mqtt.conftest import GatewayProcess

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("kind", "transport", "tls"),
    [("mqtts", "tcp", True), ("ws", "websockets", False), ("wss", "websockets", True)],
)
def test_publish_and_subscribe_over(
    gateway: GatewayProcess, device_factory: Any, kind: str, transport: str, tls: bool
) -> None:
    options: dict[str, Any] = {"port": gateway.ports[kind], "transport": transport}
    if tls:
        options["ca"] = gateway.mesh.ca  # the stack's CA, as for the router's amqps
    device = device_factory("device@iot", client_id=f"{kind}-device", **options)
    assert device.connect() == 0
    assert [rc.value for rc in device.subscribe("broadcast", qos=1)] == [1]
    backend = device_factory("backend@iot", client_id=f"{kind}-backend", **options)
    assert backend.connect() == 0
    assert backend.publish("broadcast", f"over {kind}".encode(), qos=1) == 0
    assert device.receive().payload == f"over {kind}".encode()
