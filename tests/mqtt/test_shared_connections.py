"""Devices of one user share that user's AMQP connection to the router (a session each);
every CONNECT still logs in with the device's own password; `--connection-per-device`
keeps one connection per device. Seen from the router's management: its connections."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from proton import Message

from tests.mqtt.conftest import Device, GatewayProcess, amqp_account, start_gateway
from tests.mqtt.test_bad_input import connect_packet
from tests.support.mesh import Mesh, wait_until
from tests.support.qdmanage import Qdmanage, add_administrator, rows

pytestmark = pytest.mark.slow

CONNECTION = "org.apache.qpid.dispatch.connection"


def gateway_connections(mesh: Mesh, prefix: str) -> list[dict[str, Any]]:
    """The router's connections whose container starts with `prefix` (the gateway's)."""
    with Qdmanage(add_administrator(mesh)) as node:
        found = rows(node.query(CONNECTION, ["container", "user", "role"]))
    return [r for r in found if str(r["container"] or "").startswith(prefix)]


def connected(port: int, mesh: Mesh, identity: str, client_id: str, **options: Any) -> Device:
    password = options.pop("password", None) or mesh.passwords[identity]
    device = Device(port, identity, password, client_id=client_id, **options)
    assert device.connect() == 0
    return device


@pytest.fixture
def per_device_gateway(mqtt_mesh: Mesh, tmp_path: Path) -> Iterator[GatewayProcess]:
    process = start_gateway(mqtt_mesh, tmp_path, "--connection-per-device")
    try:
        yield process
    finally:
        process.stop()


def test_devices_of_one_user_share_its_connection(mqtt_mesh: Mesh, gateway: GatewayProcess) -> None:
    devices = [connected(gateway.port, mqtt_mesh, "device@iot", f"share-{i}") for i in range(3)]
    other = connected(gateway.port, mqtt_mesh, "backend@iot", "share-backend")
    try:
        # the logins' own connections close once checked: one per user is left
        wait_until(
            lambda: len(gateway_connections(mqtt_mesh, "mqtt/iot/device@iot")) == 1,
            10,
            "one connection for device@iot's three devices",
        )
        ours = gateway_connections(mqtt_mesh, "mqtt/iot/")
        assert sorted(r["user"] for r in ours) == ["backend@iot", "device@iot"]
        # each device is its own session on it: one's subscription is not another's
        assert [rc.value for rc in devices[0].subscribe("broadcast", qos=1)] == [1]
        assert other.publish("broadcast", b"to the first only", qos=1) == 0
        assert devices[0].receive().payload == b"to the first only"
        assert devices[1].messages.empty() and devices[2].messages.empty()
    finally:
        for device in [*devices, other]:
            device.close()
    wait_until(
        lambda: not gateway_connections(mqtt_mesh, "mqtt/iot/"),
        10,
        "the last device out closes its user's connection",
    )


def test_each_connect_checks_the_password_though_the_user_is_connected(
    mqtt_mesh: Mesh, gateway: GatewayProcess
) -> None:
    first = connected(gateway.port, mqtt_mesh, "device@iot", "checked-1")
    try:
        wrong = Device(gateway.port, "device@iot", "not-the-password", client_id="checked-2")
        assert wrong.connect() == 134  # bad user name or password
        wrong.client.loop_stop()
        assert [rc.value for rc in first.subscribe("broadcast", qos=1)] == [1]
    finally:
        first.close()


def test_a_device_killed_leaves_the_other_devices_of_its_user(
    mqtt_mesh: Mesh, gateway: GatewayProcess
) -> None:
    doomed = connected(gateway.port, mqtt_mesh, "device@iot", "left-1")
    staying = connected(gateway.port, mqtt_mesh, "device@iot", "left-2")
    sender = connected(gateway.port, mqtt_mesh, "backend@iot", "left-sender")
    try:
        assert [rc.value for rc in doomed.subscribe("broadcast", qos=1)] == [1]
        assert [rc.value for rc in staying.subscribe("broadcast", qos=1)] == [1]
        doomed.kill()
        # the killed device's session ends, its subscription with it: the multicast
        # reaches the one left, and the shared connection goes on
        assert sender.publish("broadcast", b"after the kill", qos=1) == 0
        assert staying.receive().payload == b"after the kill"
        assert len(gateway_connections(mqtt_mesh, "mqtt/iot/device@iot")) == 1
    finally:
        staying.close()
        sender.close()


def test_a_message_no_device_can_take_ends_no_device(
    mqtt_mesh: Mesh, gateway: GatewayProcess
) -> None:
    """Invalid UTF-8 in a map body, from an AMQP producer: the gateway cannot turn it into
    a PUBLISH. Each device rejects it; neither device nor their shared connection ends."""
    devices = [connected(gateway.port, mqtt_mesh, "device@iot", f"poison-{i}") for i in range(2)]
    producer = amqp_account(mqtt_mesh, "backend@iot").blocking()
    try:
        for device in devices:
            assert [rc.value for rc in device.subscribe("broadcast", qos=1)] == [1]
        sender = producer.create_sender("broadcast")
        bad = sender.link.delivery(b"undecodable")
        sender.link.send(Message(body={"k": "vX"}).encode().replace(b"vX", b"v\xff"))
        sender.link.advance()
        producer.wait(lambda: bool(bad.remote_state), msg="the mesh's outcome")
        sender.send(Message(body=b"after it"))
        for device in devices:
            assert device.receive().payload == b"after it"
        assert all(device.disconnects.empty() for device in devices)
    finally:
        producer.close()
        for device in devices:
            device.close()


def test_devices_gone_before_their_login_ends_leave_no_connection(
    mqtt_mesh: Mesh, gateway: GatewayProcess
) -> None:
    """A device that hangs up while its login is on its way: the login's connection
    closes when the login ends, though its user has a connection to join."""
    staying = connected(gateway.port, mqtt_mesh, "device@iot", "early-staying")
    try:
        for _ in range(5):
            with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as sock:
                sock.sendall(connect_packet("device@iot", mqtt_mesh.passwords["device@iot"]))
        # a login that starts after theirs: when it is through, so are they
        later = connected(gateway.port, mqtt_mesh, "device@iot", "early-later")
        later.close()
        wait_until(
            lambda: len(gateway_connections(mqtt_mesh, "mqtt/iot/device@iot")) == 1,
            15,
            "only the staying device's connection",
        )
    finally:
        staying.close()


def test_connection_per_device_opens_one_for_each(
    mqtt_mesh: Mesh, per_device_gateway: GatewayProcess
) -> None:
    devices = [
        connected(per_device_gateway.port, mqtt_mesh, "device@iot", f"own-{i}") for i in range(2)
    ]
    try:
        containers = sorted(r["container"] for r in gateway_connections(mqtt_mesh, "mqtt/iot/"))
        assert containers == ["mqtt/iot/own-0", "mqtt/iot/own-1"]
    finally:
        for device in devices:
            device.close()
