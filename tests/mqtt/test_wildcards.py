"""Wildcard subscriptions (`+`, `#`) through the gateway, matched against the compiled
address index: the multicast and topic addresses of the device's space, minus those it
may not read; followed when the index changes; retained messages; unsubscribing."""

from __future__ import annotations

import json
import queue
from pathlib import Path
from typing import Any

import pytest

from tests.mqtt.conftest import GatewayProcess, start_gateway
from tests.support.mesh import Mesh

pytestmark = pytest.mark.slow


def _subscriber(device_factory: Any, identity: str, topic_filter: str, qos: int = 1) -> Any:
    device = device_factory(identity)
    assert device.connect() == 0
    assert [int(rc.value) for rc in device.subscribe(topic_filter, qos=qos)] == [qos]
    return device


def _publisher(device_factory: Any) -> Any:
    device = device_factory("tracker@iot")
    assert device.connect() == 0
    return device


def _until(subscriber: Any, payload: bytes) -> list[Any]:
    """Messages received up to the one with `payload` (a QoS 0 message another test left
    waiting for a subscriber may come first: the gateway sends a closing device's last
    messages once someone takes them)."""
    received = [subscriber.receive()]
    while received[-1].payload != payload:
        received.append(subscriber.receive())
    return received


def test_plus_matches_one_level(device_factory: Any) -> None:
    subscriber = _subscriber(device_factory, "tracker@iot", "fleet/+/position")
    publisher = _publisher(device_factory)
    publisher.publish("fleet/t1/fuel", b"not a position", qos=0)
    for topic in ("fleet/t1/position", "fleet/t2/position"):
        assert publisher.publish(topic, topic.encode(), qos=1) in (0, 16)
    received = _until(subscriber, b"fleet/t2/position")
    # Each with its own topic name and the subscription's QoS; no fuel reading.
    assert ("fleet/t1/position", b"fleet/t1/position", 1) in [
        (m.topic, m.payload, m.qos) for m in received
    ]
    assert (received[-1].topic, received[-1].qos) == ("fleet/t2/position", 1)
    assert all(m.topic.endswith("/position") for m in received)


def test_hash_matches_every_level_but_leaves_queues_out(device_factory: Any) -> None:
    # Every publish-subscribe address tracker@iot may read (broadcast, alerts: left out).
    subscriber = _subscriber(device_factory, "tracker@iot", "#", qos=0)
    publisher = _publisher(device_factory)
    publisher.publish("fleet.t1.log", b"stored in a queue", qos=1)
    publisher.publish("fleet/t1/fuel", b"72%", qos=1)
    received = _until(subscriber, b"72%")
    assert received[-1].topic == "fleet/t1/fuel"
    assert "fleet.t1.log" not in [m.topic for m in received]


def test_addresses_the_device_may_not_read_are_left_out(device_factory: Any) -> None:
    # dispatch@iot may read fleet/t1/* only: the filter is granted, t2 is not followed.
    subscriber = _subscriber(device_factory, "dispatch@iot", "fleet/+/position")
    publisher = _publisher(device_factory)
    publisher.publish("fleet/t2/position", b"t2", qos=0)
    publisher.publish("fleet/t1/position", b"t1", qos=1)
    assert "fleet/t2/position" not in [m.topic for m in _until(subscriber, b"t1")]


def test_a_retained_message_reaches_a_new_wildcard_subscriber(device_factory: Any) -> None:
    # A multicast publish gets credit (and its PUBACK) only while someone subscribes.
    _subscriber(device_factory, "tracker@iot", "fleet/t2/position")
    publisher = _publisher(device_factory)
    publisher.client.publish("fleet/t2/position", b"parked", qos=1, retain=True)
    assert publisher.acks.get(timeout=10)
    subscriber = _subscriber(device_factory, "tracker@iot", "fleet/+/position")
    message = _until(subscriber, b"parked")[-1]
    assert (message.topic, message.payload, message.retain) == (
        "fleet/t2/position",
        b"parked",
        True,
    )
    publisher.client.publish("fleet/t2/position", b"", qos=1, retain=True)  # clear it
    assert publisher.acks.get(timeout=10)


def test_unsubscribing_a_filter_keeps_an_exact_subscription(device_factory: Any) -> None:
    subscriber = _subscriber(device_factory, "tracker@iot", "fleet/#")
    assert [int(rc.value) for rc in subscriber.subscribe("fleet/t1/fuel", qos=1)] == [1]
    unsubscribed: queue.Queue[int] = queue.Queue()
    subscriber.client.on_unsubscribe = lambda *_: unsubscribed.put(1)
    subscriber.client.unsubscribe("fleet/#")
    unsubscribed.get(timeout=10)  # UNSUBACK: the gateway no longer follows the filter
    publisher = _publisher(device_factory)
    publisher.publish("fleet/t1/position", b"no longer followed", qos=0)
    publisher.publish("fleet/t1/fuel", b"still followed", qos=1)
    received = _until(subscriber, b"still followed")
    assert b"no longer followed" not in [m.payload for m in received]


def test_an_address_added_to_the_index_is_followed(
    gateway: GatewayProcess, device_factory: Any
) -> None:
    """As `enmesh apply` rewrites mqtt/addresses.json: a filter reaches the new address
    without the device subscribing again."""
    subscriber = _subscriber(device_factory, "tracker@iot", "fleet/+/speed")
    index = gateway.state.parent / "addresses.json"
    spaces = json.loads(index.read_text())
    spaces["iot"]["fleet/t1/speed"] = "multicast"
    index.write_text(json.dumps(spaces))
    publisher = _publisher(device_factory)
    # Multicast: the publish waits for credit, which comes once the gateway has attached.
    assert publisher.publish("fleet/t1/speed", b"88 km/h", qos=1, timeout=30) in (0, 16)
    assert _until(subscriber, b"88 km/h")[-1].topic == "fleet/t1/speed"


def test_without_an_address_index_wildcards_are_refused(
    mqtt_mesh: Mesh, tmp_path: Path, device_factory: Any
) -> None:
    gateway = start_gateway(mqtt_mesh, tmp_path, address_index=False)
    try:
        device = device_factory("tracker@iot", port=gateway.port)
        assert device.connect() == 0
        assert [int(rc.value) for rc in device.subscribe("fleet/+/position")] == [0xA2]
    finally:
        gateway.stop()
