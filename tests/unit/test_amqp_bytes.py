"""enmesh.mqtt.amqp_bytes and convert: plain messages without proton's Message, the same
bytes and payloads as with it."""

from __future__ import annotations

import pytest
from proton import Data, Message

from enmesh.mqtt import amqp_bytes, convert
from enmesh.mqtt.packets import Publish

# Around every size boundary: str8/str32, vbin8/vbin32, list8/list32 of the properties.
LENGTHS = [0, 1, 5, 249, 250, 251, 252, 253, 255, 256, 300, 70_000]


@pytest.mark.parametrize("topic_length", LENGTHS)
@pytest.mark.parametrize("payload_length", [0, 1, 255, 256, 70_000])
@pytest.mark.parametrize("durable", [True, False])
def test_a_plain_publish_is_written_as_proton_writes_it(
    topic_length: int, payload_length: int, durable: bool
) -> None:
    topic, payload = "t" * topic_length, bytes(range(256)) * (payload_length // 256 + 1)
    payload = payload[:payload_length]
    expected = Message(body=payload, address=topic, durable=durable).encode()
    assert amqp_bytes.encode_publish(topic, payload, durable) == expected


def test_a_topic_outside_ascii_is_encoded_as_utf8() -> None:
    topic = "sensors/température/é" * 20
    expected = Message(body=b"x", address=topic, durable=True).encode()
    assert amqp_bytes.encode_publish(topic, b"x", True) == expected


def _encoded(message: Message) -> bytes:
    data: bytes = message.encode()
    return data


@pytest.mark.parametrize(
    ("message", "payload"),
    [
        (Message(body=b"\x00\xffbinary"), b"\x00\xffbinary"),
        (Message(body="text é"), "text é".encode()),
        (Message(body=None), b""),
        (Message(body=b"d" * 300, inferred=True), b"d" * 300),  # one data section
        (Message(body=b"x", durable=True, priority=7, ttl=5), b"x"),  # a full header
        (Message(body=b"x", annotations={"x-opt-a": 1}), b"x"),
    ],
)
def test_plain_bodies_are_read_without_proton(message: Message, payload: bytes) -> None:
    data = _encoded(message)
    assert amqp_bytes.plain_payload(data, properties_matter=True) == payload
    assert amqp_bytes.plain_payload(data, properties_matter=False) == payload


@pytest.mark.parametrize(
    "message",
    [
        Message(body=42),  # an AMQP value with no MQTT form
        Message(body=[1, 2]),
        Message(body={"a": 1}),
    ],
)
def test_other_bodies_go_to_proton(message: Message) -> None:
    assert amqp_bytes.plain_payload(_encoded(message), properties_matter=False) is None


def test_properties_matter_only_to_mqtt5() -> None:
    with_props = _encoded(Message(body=b"x", content_type="text/plain", properties={"k": "v"}))
    assert amqp_bytes.plain_payload(with_props, properties_matter=False) == b"x"
    assert amqp_bytes.plain_payload(with_props, properties_matter=True) is None


def test_a_sequence_and_two_data_sections_go_to_proton() -> None:
    data = Data()
    data.put_described()
    data.enter()
    data.put_ulong(0x76)
    data.put_list()
    data.enter()
    data.put_int(1)
    data.exit()
    data.exit()
    sequence = b"\x00\x53\x70\x45" + data.encode()
    assert amqp_bytes.plain_payload(sequence, properties_matter=False) is None
    two = b"\x00\x53\x75\xa0\x01a\x00\x53\x75\xa0\x01b"
    assert amqp_bytes.plain_payload(two, properties_matter=False) is None


@pytest.mark.parametrize("garbage", [b"", b"\x01\x02", b"\x00\x53\x77\xa0\x09short", b"\x00"])
def test_bytes_it_cannot_read_are_left_to_proton(garbage: bytes) -> None:
    assert amqp_bytes.plain_payload(garbage, properties_matter=False) in (None, b"")


@pytest.mark.parametrize("version", [4, 5])
@pytest.mark.parametrize(
    "message",
    [
        Message(body=b"payload", address="a/b"),
        Message(body="text"),
        Message(body=None),
        Message(body=3.5),
        Message(body=b"x", content_type="application/json", reply_to="r", correlation_id="c"),
        Message(body=b"x", properties={"colour": "red", "n": 1}),
    ],
)
def test_decode_gives_what_proton_s_reading_gives(version: int, message: Message) -> None:
    data = _encoded(message)
    decoded = Message()
    decoded.decode(data)
    expected = convert.from_amqp("t/1", decoded, 1, 7, version)
    assert convert.decode("t/1", data, 1, 7, version) == expected


@pytest.mark.parametrize(
    "props",
    [
        {},
        {"payload_format_indicator": 1},  # no AMQP field for it: still plain
        {"content_type": "text/plain"},
        {"user_property": [("k", "v")], "message_expiry": 30},
    ],
)
def test_encode_gives_what_proton_s_writing_gives(props: dict[str, object]) -> None:
    publish = Publish("a/b", b"payload", 1, False, 3, props)
    assert convert.encode(publish) == convert.to_amqp(publish).encode()


def test_a_message_without_content_type_gives_mqtt5_none() -> None:
    """proton-python reads a missing content type as the symbol 'None'; MQTT 5
    subscribers got `content_type: None` on every such message before."""
    data = _encoded(Message(body=b"x", properties={"k": "v"}))
    props = convert.decode("t", data, 0, 0, 5).props
    assert "content_type" not in props
    assert props["user_property"] == [("k", "v")]
