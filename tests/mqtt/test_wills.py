"""Last will: published when a device's connection ends without DISCONNECT, not after a
clean DISCONNECT, delayed (5.0) and cancelled by a reconnect, and kept across a restart
of the gateway (SIGKILL), then published with the address space's will account."""

from __future__ import annotations

import contextlib
import queue
import signal
import socket
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from proton.utils import BlockingConnection, BlockingReceiver

from tests.mqtt.conftest import Device, GatewayProcess, amqp_account, start_gateway
from tests.mqtt.test_bad_input import read_all, utf8_field
from tests.support.mesh import Mesh

pytestmark = pytest.mark.slow


@pytest.fixture
def telemetry(mqtt_mesh: Mesh) -> Iterator[tuple[BlockingConnection, BlockingReceiver]]:
    """An AMQP consumer of `telemetry` (anycast) as backend@iot, on the other router."""
    connection = amqp_account(mqtt_mesh, "backend@iot").blocking()
    try:
        yield connection, connection.create_receiver("telemetry")
    finally:
        connection.close()


def next_body(receiver: BlockingReceiver) -> bytes:
    message = receiver.receive(timeout=15)
    receiver.accept()
    return bytes(message.body)


def marker(device_factory: Any, text: bytes) -> None:
    """Publish `text` to telemetry: whatever arrives before it was published before it."""
    sender = device_factory("device@iot", client_id="marker")
    assert sender.connect() == 0
    sender.client.publish("telemetry", text, qos=1)  # acknowledged when the test accepts


@pytest.mark.parametrize("version", [mqtt.MQTTv311, mqtt.MQTTv5])
def test_will_published_when_the_socket_dies(
    device_factory: Any, telemetry: Any, version: int
) -> None:
    _, receiver = telemetry
    will = f"device-7 v{version} offline".encode()
    device = device_factory("device@iot", version=version, will=("telemetry", will, 1))
    assert device.connect() == 0
    device.kill()
    assert next_body(receiver) == will


def test_no_will_after_a_clean_disconnect(device_factory: Any, telemetry: Any) -> None:
    _, receiver = telemetry
    device = device_factory("device@iot", will=("telemetry", b"must not appear", 1))
    assert device.connect() == 0
    device.close()
    device.disconnects.get(timeout=10)
    marker(device_factory, b"after the clean disconnect")
    assert next_body(receiver) == b"after the clean disconnect"


def test_will_delay_cancelled_by_reconnect(device_factory: Any, telemetry: Any) -> None:
    _, receiver = telemetry
    props = Properties(PacketTypes.WILLMESSAGE)
    props.WillDelayInterval = 30
    options = {"client_id": "delayed", "will": ("telemetry", b"too early", 1)}
    device = device_factory("device@iot", will_props=props, **options)
    device.connect_properties = _session_expiry(60)
    assert device.connect() == 0
    device.kill()
    again = device_factory("device@iot", **options)
    assert again.connect() == 0  # back within the delay: the first will is dropped
    again.close()
    again.disconnects.get(timeout=10)
    marker(device_factory, b"no will before this")
    assert next_body(receiver) == b"no will before this"


def _session_expiry(seconds: int) -> Properties:
    props = Properties(PacketTypes.CONNECT)
    props.SessionExpiryInterval = seconds
    return props


def test_will_survives_a_gateway_restart(mqtt_mesh: Mesh, tmp_path: Path, telemetry: Any) -> None:
    _, receiver = telemetry
    password_file = tmp_path / "wills-password"
    password_file.write_text(mqtt_mesh.passwords["wills@iot"])
    account = f"--will-account=wills@iot={password_file}"
    gateway = start_gateway(mqtt_mesh, tmp_path, account)
    try:
        device = Device(
            gateway.port,
            "device@iot",
            mqtt_mesh.passwords["device@iot"],
            will=("telemetry", b"lost with the gateway", 1),
        )
        assert device.connect() == 0
        gateway.stop(signal.SIGKILL)  # the gateway dies with the device's will in memory
        device.client.loop_stop()
        device.kill()
        restarted = GatewayProcess(mqtt_mesh, gateway.state, gateway.log, gateway.ports)
        restarted.extra = (account,)
        restarted.start()
        gateway = restarted
        assert next_body(receiver) == b"lost with the gateway"
    finally:
        gateway.stop()


def test_will_published_when_keep_alive_is_missed(
    gateway: GatewayProcess, mqtt_mesh: Mesh, telemetry: Any
) -> None:
    """A device that goes silent (its socket stays open) past 1.5 x its keep-alive."""
    _, receiver = telemetry
    password = mqtt_mesh.passwords["device@iot"]
    header = utf8_field("MQTT") + bytes([5, 0xC2 | 0x04 | 0x08]) + struct.pack(">H", 1)  # 1 s
    will = b"\x00" + utf8_field("telemetry") + utf8_field("went silent")  # no will properties
    body = (
        header
        + b"\x00"
        + utf8_field("silent")
        + will
        + utf8_field("device@iot")
        + utf8_field(password)
    )
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as sock:
        sock.sendall(bytes([0x10, len(body)]) + body)
        connack = sock.recv(64)
        assert connack[0] == 0x20 and connack[3] == 0, connack
        assert next_body(receiver) == b"went silent"
        # it said why before closing: DISCONNECT with 0x8D, keep alive timeout
        answer = read_all(sock)
        assert answer[0] == 0xE0 and answer[2] == 0x8D, answer


def test_a_retained_will_to_a_topic_nobody_listens_to_is_kept_as_retained(
    device_factory: Any,
) -> None:
    """backend@iot's will goes to `broadcast` (multicast) with retain set, while nobody
    listens: it is the topic's retained message for whoever subscribes later
    (MQTT-3.1.2-17), whether or not the mesh has delivered it yet."""
    device = device_factory(
        "backend@iot", client_id="dying", will=("broadcast", b"backend offline", 1, True)
    )
    assert device.connect() == 0
    device.kill()
    try:
        late = device_factory("device@iot", client_id="late-listener")
        assert late.connect() == 0
        retained = None
        for _ in range(30):  # stored once the gateway has seen the socket die
            assert [rc.value for rc in late.subscribe("broadcast", qos=1)] == [1]
            with contextlib.suppress(queue.Empty):
                while retained is None:  # the will may also arrive live, unretained
                    message = late.receive(timeout=1)
                    if message.retain:
                        retained = message
            if retained is not None:
                break
            late.client.unsubscribe("broadcast")
        assert retained is not None and retained.payload == b"backend offline"
    finally:
        cleaner = device_factory("backend@iot", client_id="cleaner")
        assert cleaner.connect() == 0
        cleaner.client.publish("broadcast", b"", qos=0, retain=True)  # clear it
