"""QoS 2 (exactly once) through the gateway: paho-mqtt devices (3.1.1 and 5.0) to MQTT
subscribers (to an AMQP consumer: tests/mqtt/test_gateway.py), and the handshake's edges
on a raw socket (a repeated PUBLISH is answered, not forwarded again; an unknown PUBREL)."""

from __future__ import annotations

import select
import socket
import struct
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from proton import Message

from tests.mqtt.conftest import GatewayProcess, amqp_account
from tests.mqtt.test_bad_input import connected, frame, utf8_field
from tests.support.mesh import Mesh

pytestmark = pytest.mark.slow

V311, V5 = mqtt.MQTTv311, mqtt.MQTTv5
PUBREC, PUBCOMP = 0x50, 0x70


@pytest.mark.parametrize("version", [V311, V5])
def test_qos2_from_mqtt_to_an_mqtt_subscriber_exactly_once(
    device_factory: Any, version: int
) -> None:
    backend = device_factory("backend@iot", version=version, client_id=f"qos2-sub-{version}")
    assert backend.connect() == 0
    assert [int(rc.value) for rc in backend.subscribe("telemetry", qos=2)] == [2]
    device = device_factory("device@iot", version=version)
    assert device.connect() == 0
    for payload in (b"first", b"second"):
        assert device.publish("telemetry", payload, qos=2) == 0  # on PUBCOMP
    received = [backend.receive() for _ in range(2)]
    assert [(m.payload, m.qos) for m in received] == [(b"first", 2), (b"second", 2)]


def _publish_qos2(packet_id: int, body: bytes, dup: bool = False) -> bytes:
    first = 0x34 | (0x08 if dup else 0)
    return frame(first, utf8_field("telemetry") + struct.pack(">H", packet_id) + b"\x00" + body)


def _read_packet(sock: socket.socket) -> bytes:
    """One short packet (remaining length < 128)."""
    head = sock.recv(2)
    assert len(head) == 2, head
    rest = b""
    while len(rest) < head[1]:
        chunk = sock.recv(head[1] - len(rest))
        assert chunk, head + rest
        rest += chunk
    return head + rest


def test_a_repeated_qos2_publish_is_answered_but_not_forwarded_again(
    gateway: GatewayProcess, mqtt_mesh: Mesh
) -> None:
    consumer = amqp_account(mqtt_mesh, "backend@iot").blocking()
    try:
        receiver = consumer.create_receiver("telemetry", credit=10)
        with connected(gateway, mqtt_mesh) as sock:
            sock.sendall(_publish_qos2(7, b"once"))
            assert bytes(receiver.receive(timeout=10).body) == b"once"
            receiver.accept()
            # The blocking client writes its disposition only while it waits on something.
            consumer.wait(lambda: bool(select.select([sock], [], [], 0)[0]), 10, "PUBREC")
            assert _read_packet(sock)[:4] == bytes([PUBREC, 2, 0, 7])
            # The PUBREC was lost on the way, say: the device sends it again, DUP set.
            sock.sendall(_publish_qos2(7, b"once", dup=True))
            assert _read_packet(sock)[:4] == bytes([PUBREC, 2, 0, 7])
            sock.sendall(frame(0x62, b"\x00\x07"))  # PUBREL 7
            assert _read_packet(sock)[:4] == bytes([PUBCOMP, 2, 0, 7])
            sock.sendall(frame(0x62, b"\x00\x09"))  # PUBREL for an id never received
            unknown = _read_packet(sock)
            assert (unknown[0], unknown[2:5]) == (PUBCOMP, bytes([0, 9, 0x92])), unknown
            # Then a new message: the next one the consumer gets (no second "once").
            sock.sendall(_publish_qos2(8, b"next"))
            assert bytes(receiver.receive(timeout=10).body) == b"next"
            receiver.accept()
    finally:
        consumer.close()


def test_an_amqp_producer_reaches_a_qos2_subscriber(mqtt_mesh: Mesh, device_factory: Any) -> None:
    device = device_factory("device@iot", client_id="qos2-broadcast")
    assert device.connect() == 0
    assert [int(rc.value) for rc in device.subscribe("broadcast", qos=2)] == [2]
    producer = amqp_account(mqtt_mesh, "backend@iot").blocking()
    try:
        producer.create_sender("broadcast").send(Message(body=b"reboot", durable=True))
    finally:
        producer.close()
    message = device.receive()
    assert (message.payload, message.qos) == (b"reboot", 2)
