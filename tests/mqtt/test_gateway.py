"""MQTT devices (paho-mqtt, 3.1.1 and 5.0) through the gateway to a real enmesh-router
mesh: QoS 0/1 to anycast and multicast, to AMQP consumers and MQTT subscribers, the
router's policy as MQTT reason codes, tenancy."""

from __future__ import annotations

from typing import Any

import paho.mqtt.client as mqtt
import pytest
from proton import Message

from tests.mqtt.conftest import amqp_account
from tests.support.mesh import Mesh

pytestmark = pytest.mark.slow

V311, V5 = mqtt.MQTTv311, mqtt.MQTTv5


def body_bytes(message: Message) -> bytes:
    return bytes(message.body)


@pytest.mark.parametrize("version", [V311, V5])
@pytest.mark.parametrize("qos", [1, 2])
def test_qos1_and_2_publish_reach_an_amqp_consumer_and_are_acked_after_acceptance(
    mqtt_mesh: Mesh, device_factory: Any, version: int, qos: int
) -> None:
    """QoS 1: the PUBACK; QoS 2: the PUBREC (so paho's PUBCOMP) only once accepted."""
    consumer = amqp_account(mqtt_mesh, "backend@iot").blocking()
    try:
        receiver = consumer.create_receiver("telemetry")
        device = device_factory("device@iot", version=version)
        assert device.connect() == 0
        payload = f"reading v{version}".encode()
        device.client.publish("telemetry", payload, qos=qos)
        message = receiver.receive(timeout=10)
        assert body_bytes(message) == payload
        assert message.durable  # QoS 1 and 2 travel as durable AMQP messages
        assert device.acks.empty()  # no PUBACK while the consumer has not settled
        receiver.accept()
        # the blocking client writes its disposition only while it waits
        consumer.wait(lambda: not device.acks.empty(), timeout=10, msg="PUBACK")
        assert device.acks.get()[1] == 0  # now the PUBACK, success
    finally:
        consumer.close()


def test_qos0_anycast_from_mqtt_to_mqtt(device_factory: Any) -> None:
    backend = device_factory("backend@iot", version=V311)
    assert backend.connect() == 0
    assert [rc.value for rc in backend.subscribe("telemetry", qos=0)] == [0]
    device = device_factory("device@iot", version=V311)
    assert device.connect() == 0
    device.publish("telemetry", b"t=21.5", qos=0)
    message = backend.receive()
    assert (message.topic, message.payload, message.qos) == ("telemetry", b"t=21.5", 0)


def test_qos1_multicast_from_mqtt_to_two_mqtt_subscribers(device_factory: Any) -> None:
    subscribers = [device_factory("device@iot", client_id=f"sub-{i}") for i in range(2)]
    for subscriber in subscribers:
        assert subscriber.connect() == 0
        assert [rc.value for rc in subscriber.subscribe("broadcast", qos=1)] == [1]
    backend = device_factory("backend@iot")
    assert backend.connect() == 0
    assert backend.publish("broadcast", b"reboot at 02:00", qos=1) == 0
    for subscriber in subscribers:
        message = subscriber.receive()
        assert (message.topic, message.payload, message.qos) == ("broadcast", b"reboot at 02:00", 1)


def test_amqp_producer_to_mqtt_subscriber_keeps_mqtt5_properties(
    mqtt_mesh: Mesh, device_factory: Any
) -> None:
    device = device_factory("device@iot")
    assert device.connect() == 0
    assert [rc.value for rc in device.subscribe("broadcast", qos=1)] == [1]
    producer = amqp_account(mqtt_mesh, "backend@iot").blocking()
    try:
        sender = producer.create_sender("broadcast")
        sender.send(
            Message(
                body=b"\x00\x01binary",
                content_type="application/octet-stream",
                properties={"site": "north"},
            )
        )
    finally:
        producer.close()
    message = device.receive()
    assert message.payload == b"\x00\x01binary"
    assert message.properties.ContentType == "application/octet-stream"
    assert ("site", "north") in message.properties.UserProperty


@pytest.mark.parametrize(("version", "expected"), [(V311, 134), (V5, 134)])
def test_wrong_password_is_a_connack_reason_code(
    device_factory: Any, version: int, expected: int
) -> None:
    # paho maps the 3.1.1 return code 4 to reason 134 ("Bad user name or password")
    device = device_factory("device@iot", version=version, password="not-the-password")
    assert device.connect() == expected


def test_user_without_space_is_refused(device_factory: Any, mqtt_mesh: Mesh) -> None:
    device = device_factory("device@iot", password=mqtt_mesh.passwords["device@iot"], client_id="x")
    device.client.username_pw_set("device", mqtt_mesh.passwords["device@iot"])
    assert device.connect() == 134


def test_forbidden_publish_is_puback_not_authorized(device_factory: Any) -> None:
    device = device_factory("device@iot")
    assert device.connect() == 0
    # device@iot may only receive from `broadcast`: the router refuses the link
    assert device.publish("broadcast", b"spoof", qos=1) == 135
    # only that publish was refused: the session goes on
    assert [rc.value for rc in device.subscribe("broadcast", qos=1)] == [1]


def test_forbidden_subscribe_is_suback_not_authorized(device_factory: Any) -> None:
    device = device_factory("device@iot")
    assert device.connect() == 0
    codes = device.subscribe("telemetry", qos=1)
    assert [rc.value for rc in codes] == [135]


def test_forbidden_subscribe_in_311_is_suback_failure(device_factory: Any) -> None:
    device = device_factory("device@iot", version=V311)
    assert device.connect() == 0
    codes = device.subscribe("telemetry", qos=1)
    assert [rc.value for rc in codes] == [128]


def test_tenancy_acme_never_sees_iot(mqtt_mesh: Mesh, device_factory: Any) -> None:
    """Both spaces have `telemetry`; each device reaches only its own space's."""
    acme = device_factory("app@acme")
    assert acme.connect() == 0
    assert [rc.value for rc in acme.subscribe("telemetry", qos=1)] == [1]
    iot_consumer = amqp_account(mqtt_mesh, "backend@iot").blocking()
    try:
        receiver = iot_consumer.create_receiver("telemetry")
        device = device_factory("device@iot")
        assert device.connect() == 0
        device.client.publish("telemetry", b"iot only", qos=1)
        assert body_bytes(receiver.receive(timeout=10)) == b"iot only"
        receiver.accept()
        iot_consumer.wait(lambda: not device.acks.empty(), timeout=10, msg="PUBACK")
        assert device.acks.get()[1] == 0
    finally:
        iot_consumer.close()
    # the acme subscriber's first message is acme's own: the iot one never came
    acme_producer = device_factory("app@acme", client_id="acme-producer")
    assert acme_producer.connect() == 0
    assert acme_producer.publish("telemetry", b"acme", qos=1) == 0
    assert acme.receive().payload == b"acme"
