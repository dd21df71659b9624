"""The gateway's MQTT codec on bytes alone: what it accepts, and the reason code and
message it gives for what it refuses."""

from __future__ import annotations

import struct

import pytest

from enmesh.mqtt import packets
from enmesh.mqtt.codec import Decoder, MalformedPacket
from enmesh.mqtt.packets import Connect, Publish, Subscribe


def s(text: str) -> bytes:
    return packets.string(text)


def connect5(props: bytes = b"\x00", flags: int = 0xC2, payload: bytes = b"") -> bytes:
    body = s("MQTT") + bytes([5, flags]) + struct.pack(">H", 60) + props
    body += payload or s("cid") + s("device@iot") + s("pw")
    return packets.frame(packets.CONNECT, 0, body)


def connected(version: int = 5) -> Decoder:
    decoder = Decoder(1024)
    decoder.version = version
    return decoder


def test_connect_with_will_and_properties_byte_by_byte() -> None:
    props = packets.properties({"session_expiry": 30, "user_property": [("a", "b")]})
    will_props = packets.properties({"will_delay": 5, "content_type": "text/plain"})
    payload = (
        s("cid") + will_props + s("telemetry") + packets.binary(b"gone") + s("u@iot") + s("pw")
    )
    data = connect5(props, flags=0xC2 | 0x04 | 0x08 | 0x20, payload=payload)
    decoder = Decoder(1024)
    found = [p for byte in data for p in decoder.feed(bytes([byte]))]
    assert len(found) == 1
    connect = found[0]
    assert isinstance(connect, Connect)
    assert (connect.version, connect.client_id, connect.username) == (5, "cid", "u@iot")
    assert connect.props == {"session_expiry": 30, "user_property": [("a", "b")]}
    assert connect.will is not None
    assert (connect.will.topic, connect.will.payload, connect.will.qos) == ("telemetry", b"gone", 1)
    assert connect.will.retain and connect.will.props["will_delay"] == 5


def test_publish_round_trip_with_properties() -> None:
    sent = Publish(
        "a/b", b"\x00data", 1, False, 7, {"content_type": "x", "user_property": [("k", "v")]}
    )
    [received] = connected().feed(packets.publish(5, sent))
    assert received == sent


@pytest.mark.parametrize(
    ("data", "reason", "words"),
    [
        (connect5(packets.properties({"topic_alias": 1})), 0x82, "topic_alias is not allowed"),
        (connect5(b"\x04\x11\x00\x00\x00"), 0x81, "runs past"),
        (connect5(flags=0xC3), 0x81, "reserved connect flag"),
        (connect5(flags=0xC2 | 0x18), 0x81, "will QoS/retain flags without a will"),
    ],
    ids=["property-not-allowed", "short-property", "reserved-flag", "will-flags"],
)
def test_bad_connect(data: bytes, reason: int, words: str) -> None:
    with pytest.raises(MalformedPacket) as caught:
        Decoder(1024).feed(data)
    assert caught.value.reason == reason
    assert words in str(caught.value)
    assert str(caught.value).startswith("CONNECT")


@pytest.mark.parametrize(
    ("data", "reason", "words"),
    [
        (packets.frame(3, 2, s("t") + b"\x00\x00\x00"), 0x81, "packet identifier 0"),
        (packets.frame(3, 0, s("a/+") + b"\x00"), 0x82, "wildcard in topic name"),
        (packets.frame(3, 0, s("t") + b"\x05\x23\x00\x01"), 0x81, "runs past"),
        (packets.frame(3, 0, s("t") + b"\x06\x26" + s("k") + s("v") + b"x"), 0x81, "runs past"),
        (packets.frame(8, 2, b"\x00\x01\x00" + s("a/#/b") + b"\x01"), 0x81, "misplaced '#'"),
        (packets.frame(8, 2, b"\x00\x01\x00" + s("a") + b"\x03"), 0x81, "subscription options"),
        (packets.frame(8, 2, b"\x00\x01\x00"), 0x82, "without a topic filter"),
        (packets.frame(2, 0, b"\x00\x00"), 0x82, "not a packet a client sends"),
        (packets.frame(12, 1, b""), 0x81, "reserved flags"),
        (b"\x30\xff\xff\xff\x7f", 0x95, "exceeds the limit of 1024"),
    ],
    ids=[
        "pid-0", "wildcard-topic", "props-past-end", "user-property-past-end", "hash-middle",
        "sub-options", "empty-subscribe", "connack-from-client", "pingreq-flags", "too-large",
    ],
)  # fmt: skip
def test_bad_packet_after_connect(data: bytes, reason: int, words: str) -> None:
    with pytest.raises(MalformedPacket) as caught:
        connected().feed(data)
    assert caught.value.reason == reason
    assert words in str(caught.value)


def test_packets_before_a_bad_one_are_kept() -> None:
    good = packets.publish(4, Publish("t", b"x", 0, False, 0, {}))
    with pytest.raises(MalformedPacket) as caught:
        connected(4).feed(good + b"\xf0\x00")
    assert [p.topic for p in caught.value.decoded if isinstance(p, Publish)] == ["t"]


def test_311_subscribe_has_no_properties() -> None:
    [subscribe] = connected(4).feed(packets.frame(8, 2, b"\x00\x05" + s("x/y") + b"\x01"))
    assert isinstance(subscribe, Subscribe)
    assert (subscribe.packet_id, subscribe.topics) == (5, [("x/y", 1)])
