"""MQTT packets as values, and the encoders for the packets a server sends."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

CONNECT, CONNACK, PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP = 1, 2, 3, 4, 5, 6, 7
SUBSCRIBE, SUBACK, UNSUBSCRIBE, UNSUBACK, PINGREQ, PINGRESP, DISCONNECT = 8, 9, 10, 11, 12, 13, 14

# MQTT 5 reason codes the gateway sends (3.1.1 maps them, see `connack`).
SUCCESS = 0x00
UNSPECIFIED = 0x80
IMPLEMENTATION_SPECIFIC = 0x83
CLIENT_ID_INVALID = 0x85
BAD_CREDENTIALS = 0x86
NOT_AUTHORIZED = 0x87
SERVER_UNAVAILABLE = 0x88
KEEP_ALIVE_TIMEOUT = 0x8D
TOPIC_FILTER_INVALID = 0x8F
TOPIC_NAME_INVALID = 0x90
PACKET_ID_NOT_FOUND = 0x92
QUOTA_EXCEEDED = 0x97
QOS_NOT_SUPPORTED = 0x9B
SHARED_NOT_SUPPORTED = 0x9E
WILDCARDS_NOT_SUPPORTED = 0xA2
NO_SUBSCRIBERS = 0x10
# 3.1.1 CONNACK return codes for the MQTT 5 reasons that have one.
CONNACK_311 = {
    SUCCESS: 0,
    0x84: 1,
    CLIENT_ID_INVALID: 2,
    SERVER_UNAVAILABLE: 3,
    QUOTA_EXCEEDED: 3,  # 3.1.1 has nothing closer than "server unavailable"
    BAD_CREDENTIALS: 4,
    NOT_AUTHORIZED: 5,
}


# Property identifier -> (name, kind). Kinds: b byte, h u16, i u32, v varint, s string,
# d binary, p string pair (user property, may repeat).
PROPERTIES: dict[int, tuple[str, str]] = {
    0x01: ("payload_format", "b"),
    0x02: ("message_expiry", "i"),
    0x03: ("content_type", "s"),
    0x08: ("response_topic", "s"),
    0x09: ("correlation_data", "d"),
    0x0B: ("subscription_id", "v"),
    0x11: ("session_expiry", "i"),
    0x12: ("assigned_client_id", "s"),
    0x13: ("server_keep_alive", "h"),
    0x15: ("auth_method", "s"),
    0x16: ("auth_data", "d"),
    0x17: ("request_problem_info", "b"),
    0x18: ("will_delay", "i"),
    0x19: ("request_response_info", "b"),
    0x1A: ("response_info", "s"),
    0x1C: ("server_reference", "s"),
    0x1F: ("reason_string", "s"),
    0x21: ("receive_maximum", "h"),
    0x22: ("topic_alias_maximum", "h"),
    0x23: ("topic_alias", "h"),
    0x24: ("maximum_qos", "b"),
    0x25: ("retain_available", "b"),
    0x26: ("user_property", "p"),
    0x27: ("maximum_packet_size", "i"),
    0x28: ("wildcard_available", "b"),
    0x29: ("subscription_id_available", "b"),
    0x2A: ("shared_available", "b"),
}
PROPERTY_IDS = {name: (ident, kind) for ident, (name, kind) in PROPERTIES.items()}


@dataclass
class Will:
    topic: str
    payload: bytes
    qos: int
    retain: bool
    props: dict[str, Any] = field(default_factory=dict)


@dataclass
class Connect:
    version: int
    client_id: str
    clean: bool
    keep_alive: int
    username: str | None
    password: bytes | None
    will: Will | None
    props: dict[str, Any]


@dataclass
class Publish:
    topic: str
    payload: bytes
    qos: int
    retain: bool
    packet_id: int
    props: dict[str, Any]
    dup: bool = False


@dataclass
class PubAck:
    kind: int  # PUBACK, PUBREC, PUBREL or PUBCOMP
    packet_id: int
    reason: int
    props: dict[str, Any]


@dataclass
class Subscribe:
    packet_id: int
    topics: list[tuple[str, int]]  # (filter, options byte)
    props: dict[str, Any]


@dataclass
class Unsubscribe:
    packet_id: int
    topics: list[str]
    props: dict[str, Any]


@dataclass
class PingReq:
    pass


@dataclass
class Disconnect:
    reason: int
    props: dict[str, Any]


Packet = Connect | Publish | PubAck | Subscribe | Unsubscribe | PingReq | Disconnect


# --- encoding ---------------------------------------------------------------------------


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def string(text: str) -> bytes:
    raw = text.encode("utf-8")
    return struct.pack(">H", len(raw)) + raw


def binary(raw: bytes) -> bytes:
    return struct.pack(">H", len(raw)) + raw


def properties(props: dict[str, Any]) -> bytes:
    out = bytearray()
    for name, value in props.items():
        ident, kind = PROPERTY_IDS[name]
        values = value if kind == "p" else [value]
        for item in values:
            out += varint(ident)
            if kind == "b":
                out.append(item)
            elif kind == "h":
                out += struct.pack(">H", item)
            elif kind == "i":
                out += struct.pack(">I", item)
            elif kind == "v":
                out += varint(item)
            elif kind == "s":
                out += string(item)
            elif kind == "d":
                out += binary(item)
            else:
                out += string(item[0]) + string(item[1])
    return varint(len(out)) + bytes(out)


def frame(kind: int, flags: int, body: bytes) -> bytes:
    return bytes([kind << 4 | flags]) + varint(len(body)) + body


def connack(version: int, session_present: bool, reason: int, props: dict[str, Any]) -> bytes:
    if version == 5:
        return frame(CONNACK, 0, bytes([int(session_present), reason]) + properties(props))
    code = CONNACK_311.get(reason, 3 if reason == SERVER_UNAVAILABLE else 5)
    return frame(CONNACK, 0, bytes([int(session_present and code == 0), code]))


def publish(version: int, message: Publish) -> bytes:
    flags = message.qos << 1 | int(message.retain) | (8 if message.dup else 0)
    body = string(message.topic)
    if message.qos:
        body += struct.pack(">H", message.packet_id)
    if version == 5:
        body += properties(message.props)
    return frame(PUBLISH, flags, body + message.payload)


def ack(version: int, kind: int, packet_id: int, reason: int = SUCCESS, text: str = "") -> bytes:
    """PUBACK/PUBREC/PUBREL/PUBCOMP/UNSUBACK-style: id, then (5.0) reason and properties."""
    body = struct.pack(">H", packet_id)
    if version == 5 and (reason or text):
        body += bytes([reason]) + properties({"reason_string": text} if text else {})
    return frame(kind, 0b0010 if kind == PUBREL else 0, body)


def suback(version: int, packet_id: int, codes: list[int]) -> bytes:
    if version != 5:  # 3.1.1 knows only the granted QoS or 0x80 failure
        codes = [c if c < 0x80 else 0x80 for c in codes]
    props = properties({}) if version == 5 else b""
    return frame(SUBACK, 0, struct.pack(">H", packet_id) + props + bytes(codes))


def unsuback(version: int, packet_id: int, codes: list[int]) -> bytes:
    if version != 5:
        return frame(UNSUBACK, 0, struct.pack(">H", packet_id))
    return frame(UNSUBACK, 0, struct.pack(">H", packet_id) + properties({}) + bytes(codes))


def disconnect(reason: int, text: str = "") -> bytes:
    """A server DISCONNECT (MQTT 5 only; a 3.1.1 server just closes)."""
    return frame(DISCONNECT, 0, bytes([reason]) + properties({"reason_string": text}))


PINGRESP_BYTES = frame(PINGRESP, 0, b"")
