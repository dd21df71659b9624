"""Persistent sessions (3.1.1 clean session 0, 5.0 session expiry) through a gateway of
this module's own, so that sessions it parks never outlive it (they would consume
`telemetry`, an anycast address other modules use).

backend@iot subscribes; device@iot publishes to `telemetry` (anycast: end to end, so the
publisher's PUBACK waits for the subscriber) and backend@iot to `alerts` (a topic: the
subscriber's own queue on the broker, through a link route).
"""

from __future__ import annotations

import contextlib
import queue
import socket
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from tests.mqtt.conftest import Device, GatewayProcess, amqp_account, start_gateway
from tests.mqtt.test_bad_input import frame, utf8_field
from tests.support.mesh import Mesh, wait_until

pytestmark = pytest.mark.slow
MESSAGES = 5


@pytest.fixture(scope="module")
def session_gateway(
    mqtt_mesh: Mesh, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    process = start_gateway(mqtt_mesh, tmp_path_factory.mktemp("sessions"))
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
def devices(mqtt_mesh: Mesh, session_gateway: GatewayProcess) -> Iterator[Any]:
    made: list[Device] = []

    def make(identity: str, version: int = mqtt.MQTTv5, **options: Any) -> Device:
        expiry = options.pop("expiry", None)
        clean = options.pop("clean", True)
        if version == mqtt.MQTTv311:
            options["clean_session"] = clean
        device = Device(
            session_gateway.port,
            identity,
            mqtt_mesh.passwords[identity],
            version=version,
            **options,
        )
        if version == mqtt.MQTTv5:
            device.clean_start = clean
            if expiry is not None:
                device.connect_properties = session_expiry(expiry)
        made.append(device)
        return device

    yield make
    for device in made:
        with contextlib.suppress(Exception):
            device.close()


def session_expiry(seconds: int) -> Properties:
    props = Properties(PacketTypes.CONNECT)
    props.SessionExpiryInterval = seconds
    return props


def persistent(make: Any, version: int, client_id: str, expiry: int = 300) -> Device:
    """backend@iot with a session that outlives its connection."""
    return make("backend@iot", version, client_id=client_id, clean=False, expiry=expiry)


def leave_subscribed(device: Device, topic: str) -> None:
    """Subscribe at QoS 1, then leave with DISCONNECT: the session is parked."""
    assert device.subscribe(topic, qos=1)[0].value == 1
    device.close()
    device.disconnects.get(timeout=10)


def end_session(make: Any, version: int, client_id: str) -> None:
    """A clean session with the same client id discards the parked one."""
    end_session_of(make, "backend@iot", client_id, version)


def end_session_of(make: Any, identity: str, client_id: str, version: int = mqtt.MQTTv5) -> None:
    device = make(identity, version, client_id=client_id, clean=True)
    assert device.connect() == 0
    device.close()
    device.disconnects.get(timeout=10)


@pytest.mark.parametrize("version", [mqtt.MQTTv311, mqtt.MQTTv5])
def test_a_persistent_session_gets_what_came_while_it_was_away(devices: Any, version: int) -> None:
    client_id = f"backend-persistent-{version}"
    subscriber = persistent(devices, version, client_id)
    assert subscriber.connect() == 0
    assert subscriber.session_present is False
    leave_subscribed(subscriber, "telemetry")
    try:
        publisher = devices("device@iot", client_id="publisher")
        assert publisher.connect() == 0
        for i in range(MESSAGES):  # QoS 1: acknowledged only once the subscriber has it
            publisher.client.publish("telemetry", f"away-{i}".encode(), qos=1)
        with pytest.raises(queue.Empty):
            publisher.acks.get(timeout=1)  # nobody has taken them yet (bounded wait)
        back = persistent(devices, version, client_id)
        assert back.connect() == 0
        assert back.session_present is True  # its subscription came with it: none sent
        received = [back.receive(timeout=15) for _ in range(MESSAGES)]
        assert [m.payload for m in received] == [f"away-{i}".encode() for i in range(MESSAGES)]
        assert {m.qos for m in received} == {1}
        acks = [publisher.acks.get(timeout=15)[1] for _ in range(MESSAGES)]
        assert all(not rc.is_failure for rc in acks), acks  # the subscriber's acceptance
        back.close()
        back.disconnects.get(timeout=10)
    finally:
        end_session(devices, version, client_id)


def test_a_topic_subscription_keeps_its_messages_on_the_broker_while_away(
    devices: Any, mqtt_mesh: Mesh
) -> None:
    client_id = "backend-alerts"
    subscriber = persistent(devices, mqtt.MQTTv5, client_id)
    assert subscriber.connect() == 0
    assert subscriber.subscribe("alerts", qos=1)[0].value == 1
    subscriber.kill()  # no DISCONNECT: the session is parked all the same
    try:
        publisher = devices("backend@iot", client_id="alerts-publisher")
        assert publisher.connect() == 0
        for i in range(MESSAGES):  # stored: the broker acknowledges, nobody needs to be there
            assert publisher.publish("alerts", f"alert-{i}".encode(), qos=1).value == 0
        back = persistent(devices, mqtt.MQTTv5, client_id)
        assert back.connect() == 0
        assert back.session_present is True
        got = [back.receive(timeout=15).payload for _ in range(MESSAGES)]
        assert got == [f"alert-{i}".encode() for i in range(MESSAGES)]
        back.close()
        back.disconnects.get(timeout=10)
    finally:
        end_session(devices, mqtt.MQTTv5, client_id)
        drain_audit(mqtt_mesh, MESSAGES)


def drain_audit(mesh: Mesh, count: int) -> None:
    """The model's durable subscription `alerts::audit` kept a copy of each alert: take
    them, so the modules after this one find it as they expect (empty)."""
    connection = amqp_account(mesh, "backend@iot").blocking()
    try:
        receiver = connection.create_receiver("alerts::audit")
        for _ in range(count):
            receiver.receive(timeout=15)
            receiver.accept()
    finally:
        connection.close()


def test_a_clean_session_discards_the_parked_one(devices: Any) -> None:
    client_id = "backend-discarded"
    subscriber = persistent(devices, mqtt.MQTTv5, client_id)
    assert subscriber.connect() == 0
    leave_subscribed(subscriber, "telemetry")
    publisher = devices("device@iot", client_id="publisher-discarded")
    assert publisher.connect() == 0
    publisher.client.publish("telemetry", b"held for a session that will not come back", qos=1)
    fresh = devices("backend@iot", client_id=client_id, clean=True)
    assert fresh.connect() == 0
    assert fresh.session_present is False
    # The held message went back to the mesh: nobody else consumes it, so its publisher
    # hears "no matching subscribers" (0x10) - not a loss, and not a delivery.
    assert publisher.acks.get(timeout=15)[1].value == 0x10
    with pytest.raises(queue.Empty):
        fresh.receive(timeout=1)  # nor is it delivered to the new, clean session


def test_a_session_expires_after_its_interval(
    devices: Any, session_gateway: GatewayProcess
) -> None:
    client_id = "backend-expiring"
    subscriber = persistent(devices, mqtt.MQTTv5, client_id, expiry=1)
    assert subscriber.connect() == 0
    leave_subscribed(subscriber, "telemetry")
    log: Path = session_gateway.log
    wait_until(
        lambda: "session of backend@iot expired" in log.read_text(),
        15,
        "the gateway to expire the session",
    )
    back = persistent(devices, mqtt.MQTTv5, client_id)
    assert back.connect() == 0
    assert back.session_present is False
    end_session(devices, mqtt.MQTTv5, client_id)


def test_a_resumed_session_checks_the_password_again(
    devices: Any, mqtt_mesh: Mesh, session_gateway: GatewayProcess
) -> None:
    client_id = "backend-wrong-password"
    subscriber = persistent(devices, mqtt.MQTTv5, client_id)
    assert subscriber.connect() == 0
    subscriber.close()
    subscriber.disconnects.get(timeout=10)
    try:
        intruder = Device(
            session_gateway.port, "backend@iot", "not the password", client_id=client_id
        )
        intruder.clean_start = False
        assert intruder.connect().value == 0x86  # bad user name or password
        back = persistent(devices, mqtt.MQTTv5, client_id)
        assert back.connect() == 0
        assert back.session_present is True  # the refused login did not end it
        back.close()
    finally:
        end_session(devices, mqtt.MQTTv5, client_id)


def raw_connect(gateway: GatewayProcess, password: str, client_id: str) -> tuple[Any, bool]:
    """A 3.1.1 CONNECT as backend@iot with clean session 0; the socket and `session
    present` from a successful CONNACK."""
    sock = socket.create_connection(("127.0.0.1", gateway.port), timeout=15)
    header = utf8_field("MQTT") + bytes([4, 0xC0]) + struct.pack(">H", 30)  # user, password
    body = header + utf8_field(client_id) + utf8_field("backend@iot") + utf8_field(password)
    sock.sendall(frame(0x10, body))
    first, connack = read_packet(sock)
    assert first == 0x20 and connack[1] == 0, connack
    return sock, bool(connack[0] & 1)


def read_packet(sock: Any) -> tuple[int, bytes]:
    """One MQTT packet: its first byte and its body."""
    first = sock.recv(1)[0]
    length, shift = 0, 0
    while True:
        byte = sock.recv(1)[0]
        length |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    body = b""
    while len(body) < length:
        body += sock.recv(length - len(body))
    return first, body


def test_an_unacknowledged_message_comes_again_with_dup_after_a_resume(
    devices: Any, mqtt_mesh: Mesh, session_gateway: GatewayProcess
) -> None:
    client_id = "raw-dup"
    password = mqtt_mesh.passwords["backend@iot"]
    sock, present = raw_connect(session_gateway, password, client_id)
    assert not present
    try:
        sock.sendall(frame(0x82, struct.pack(">H", 1) + utf8_field("telemetry") + b"\x01"))
        assert read_packet(sock) == (0x90, b"\x00\x01\x01")  # SUBACK, QoS 1 granted
        publisher = devices("device@iot", client_id="dup-publisher")
        assert publisher.connect() == 0
        publisher.client.publish("telemetry", b"until acknowledged", qos=1)
        first, publish = read_packet(sock)
        assert first == 0x32  # PUBLISH, QoS 1, no DUP
        sock.close()  # gone without PUBACK (and without DISCONNECT)
        sock, present = raw_connect(session_gateway, password, client_id)
        assert present
        again, repeated = read_packet(sock)
        assert (again, repeated) == (0x3A, publish)  # DUP set, same packet id and payload
        packet_id = repeated[2 + struct.unpack(">H", repeated[:2])[0] :][:2]
        sock.sendall(frame(0x40, packet_id))  # PUBACK: now the device has it
        assert publisher.acks.get(timeout=15)[1].value == 0  # end to end: accepted
        sock.sendall(b"\xe0\x00")  # DISCONNECT
    finally:
        sock.close()
        end_session(devices, mqtt.MQTTv311, client_id)


def test_a_parked_multicast_subscriber_holds_back_no_one(devices: Any) -> None:
    """The router paces a multicast producer to its slowest subscriber: a parked session
    takes its copies (kept in the gateway) instead of holding them unsettled."""
    count = 400  # more than a credit window (64) and the router's queue for a consumer (250)
    client_id = "device-parked-broadcast"
    parked = devices("device@iot", client_id=client_id, clean=False, expiry=300)
    assert parked.connect() == 0
    leave_subscribed(parked, "broadcast")
    try:
        live = devices("device@iot", client_id="device-live-broadcast")
        assert live.connect() == 0
        assert live.subscribe("broadcast", qos=1)[0].value == 1
        publisher = devices("backend@iot", client_id="broadcaster")
        assert publisher.connect() == 0
        for i in range(count):
            publisher.client.publish("broadcast", f"b-{i}".encode(), qos=1)
        got = [live.receive(timeout=15).payload for _ in range(count)]
        assert got == [f"b-{i}".encode() for i in range(count)]
        assert len([publisher.acks.get(timeout=15) for _ in range(count)]) == count
        back = devices("device@iot", client_id=client_id, clean=False, expiry=300)
        assert back.connect() == 0
        assert back.session_present is True
        kept = [back.receive(timeout=15).payload for _ in range(count)]
        assert kept == got
        back.close()
        back.disconnects.get(timeout=10)
    finally:
        end_session_of(devices, "device@iot", client_id)


def test_a_clean_session_is_not_resumed(devices: Any) -> None:
    """MQTT-3.1.2-6: a clean session's state is not reused by a later CONNECT that asks
    to resume (the connected one ends; the new one starts empty)."""
    client_id = "backend-clean-then-resume"
    clean = devices("backend@iot", client_id=client_id, clean=True)
    assert clean.connect() == 0
    assert clean.subscribe("telemetry", qos=1)[0].value == 1
    resuming = persistent(devices, mqtt.MQTTv5, client_id)
    assert resuming.connect() == 0
    assert resuming.session_present is False
    resuming.close()
    resuming.disconnects.get(timeout=10)
    end_session(devices, mqtt.MQTTv5, client_id)
