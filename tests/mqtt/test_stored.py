"""Store-and-forward address types through the gateway: a queue and a topic with its
durable subscription (`topic::subscription`), held by the real RabbitMQ behind the mesh."""

from __future__ import annotations

import socket
from typing import Any

import paho.mqtt.client as mqtt
import pytest

from tests.mqtt.conftest import GatewayProcess
from tests.mqtt.test_bad_input import connect_packet, frame, utf8_field
from tests.support.mesh import Mesh

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("version", [mqtt.MQTTv311, mqtt.MQTTv5])
def test_queue_holds_a_qos1_publish_until_an_mqtt_subscriber_comes(
    device_factory: Any, version: int
) -> None:
    device = device_factory("device@iot", version=version)
    assert device.connect() == 0
    payload = f"event for v{version}".encode()
    # PUBACK with nobody consuming: the broker has taken ownership of the message
    assert device.publish("events", payload, qos=1) == 0
    backend = device_factory("backend@iot", version=version, client_id=f"events-{version}")
    assert backend.connect() == 0
    assert [rc.value for rc in backend.subscribe("events", qos=1)] == [1]
    message = backend.receive()
    assert (message.topic, message.payload, message.qos) == ("events", payload, 1)


def test_topic_reaches_a_live_subscriber_and_a_durable_subscription(
    device_factory: Any,
) -> None:
    live = device_factory("backend@iot", client_id="alerts-live")
    durable = device_factory("backend@iot", client_id="alerts-audit")
    for subscriber, topic in ((live, "alerts"), (durable, "alerts::audit")):
        assert subscriber.connect() == 0
        assert [rc.value for rc in subscriber.subscribe(topic, qos=1)] == [1]
    publisher = device_factory("backend@iot", client_id="alerts-publisher")
    assert publisher.connect() == 0
    assert publisher.publish("alerts", b"device 7 at 91C", qos=1) == 0
    assert live.receive().payload == b"device 7 at 91C"
    message = durable.receive()
    assert (message.topic, message.payload) == ("alerts::audit", b"device 7 at 91C")


def test_retained_message_goes_to_a_later_subscriber(device_factory: Any) -> None:
    publisher = device_factory("backend@iot", client_id="retain-publisher")
    assert publisher.connect() == 0
    publisher.client.publish("alerts", b"latest state", qos=1, retain=True)
    assert publisher.acks.get(timeout=10)[1] == 0  # the broker took it: nobody listened
    try:
        for version in (mqtt.MQTTv5, mqtt.MQTTv311):
            late = device_factory("backend@iot", client_id=f"late-{version}", version=version)
            assert late.connect() == 0
            assert [rc.value for rc in late.subscribe("alerts", qos=1)] == [1]
            message = late.receive()
            assert (message.payload, message.retain, message.qos) == (b"latest state", True, 1)
    finally:
        publisher.client.publish("alerts", b"", qos=1, retain=True)  # an empty one deletes it
        assert publisher.acks.get(timeout=10)[1] == 0
    cleared = device_factory("backend@iot", client_id="after-clear")
    assert cleared.connect() == 0
    assert [rc.value for rc in cleared.subscribe("alerts", qos=1)] == [1]
    assert publisher.publish("alerts", b"live", qos=1) == 0
    assert cleared.receive().payload == b"live"  # first: no retained message came before it


def test_a_retained_publish_then_disconnect_at_once_is_kept(
    mqtt_mesh: Mesh, gateway: GatewayProcess, device_factory: Any
) -> None:
    """As `mosquitto_pub -r`: CONNECT, a QoS 0 retained PUBLISH and DISCONNECT in one
    write. The device is leaving when the mesh attaches its sender: still kept."""
    publish = frame(0x31, utf8_field("alerts") + b"\x00" + b"left at once")  # 5.0, retain
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as sock:
        sock.sendall(
            connect_packet("backend@iot", mqtt_mesh.passwords["backend@iot"])
            + publish
            + b"\xe0\x00"  # DISCONNECT
        )
        while sock.recv(4096):  # until the gateway closes
            pass
    late = device_factory("backend@iot", client_id="late-after-quick")
    assert late.connect() == 0
    try:
        assert [rc.value for rc in late.subscribe("alerts", qos=1)] == [1]
        message = late.receive()
        assert (message.payload, message.retain) == (b"left at once", True)
    finally:
        late.client.publish("alerts", b"", qos=1, retain=True)  # an empty one deletes it
        assert late.acks.get(timeout=10)[1] == 0


def test_a_refused_topic_listed_twice_gets_no_retained_message(device_factory: Any) -> None:
    """device@iot may not receive from `telemetry`. Subscribing to it twice in one
    SUBSCRIBE must not turn the second entry into a grant (it answered at once while the
    router was still deciding the first) and hand over the retained message."""
    publisher = device_factory("device@iot", client_id="retain-telemetry")
    assert publisher.connect() == 0
    publisher.client.publish("telemetry", b"retained reading", qos=0, retain=True)
    allowed = device_factory("backend@iot", client_id="telemetry-reader")
    assert allowed.connect() == 0
    assert [rc.value for rc in allowed.subscribe("telemetry", qos=1)] == [1]
    assert allowed.receive().payload == b"retained reading"  # it is stored
    try:
        snooper = device_factory("device@iot", client_id="snooper")
        assert snooper.connect() == 0
        snooper.client.subscribe([("telemetry", 1), ("telemetry", 1)])
        assert [rc.value for rc in snooper.subacks.get(timeout=10)] == [135, 135]
        assert [rc.value for rc in snooper.subscribe("broadcast", qos=1)] == [1]
        backend = device_factory("backend@iot", client_id="announcer")
        assert backend.connect() == 0
        assert backend.publish("broadcast", b"live", qos=1) == 0
        assert snooper.receive().payload == b"live"  # first: nothing of telemetry before it
    finally:
        publisher.client.publish("telemetry", b"", qos=0, retain=True)
