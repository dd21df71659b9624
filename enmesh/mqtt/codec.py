"""A strict MQTT 3.1.1 / 5.0 packet decoder for the server side, sans I/O.

`Decoder.feed(bytes)` returns whole packets; anything the specifications forbid raises
`MalformedPacket` with the MQTT 5 reason code to send (0x81 malformed, 0x82 protocol
error, 0x95 packet too large) and a message naming the packet and the field. Why not a
library: see docs/mqtt.md "Design".
"""

from __future__ import annotations

import struct
from typing import Any

from enmesh.mqtt.packets import (
    CONNECT,
    DISCONNECT,
    PINGREQ,
    PROPERTIES,
    PUBACK,
    PUBCOMP,
    PUBLISH,
    PUBREC,
    PUBREL,
    SUBSCRIBE,
    UNSUBSCRIBE,
    Connect,
    Disconnect,
    Packet,
    PingReq,
    PubAck,
    Publish,
    Subscribe,
    Unsubscribe,
    Will,
)

MALFORMED, PROTOCOL_ERROR, PACKET_TOO_LARGE = 0x81, 0x82, 0x95
UNSUPPORTED_VERSION = 0x84


class MalformedPacket(Exception):  # noqa: N818 - the MQTT name for it
    """Bad input from a client; `reason` is the MQTT 5 reason code to close with."""

    def __init__(self, reason: int, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.decoded: list[Packet] = []  # whole packets that came before the bad one


class UnsupportedVersion(MalformedPacket):
    def __init__(self, message: str) -> None:
        super().__init__(UNSUPPORTED_VERSION, message)


class Reader:
    """Reads one packet's variable header and payload; every short read is malformed."""

    def __init__(self, data: bytes, packet: str) -> None:
        self.data, self.pos, self.packet = data, 0, packet

    def fail(self, what: str, reason: int = MALFORMED) -> MalformedPacket:
        return MalformedPacket(reason, f"{self.packet}: {what} (at byte {self.pos})")

    def take(self, count: int, what: str) -> bytes:
        if self.pos + count > len(self.data):
            raise self.fail(f"{what} runs past the end of the packet")
        chunk = self.data[self.pos : self.pos + count]
        self.pos += count
        return chunk

    def byte(self, what: str) -> int:
        return self.take(1, what)[0]

    def u16(self, what: str) -> int:
        value: int = struct.unpack(">H", self.take(2, what))[0]
        return value

    def u32(self, what: str) -> int:
        value: int = struct.unpack(">I", self.take(4, what))[0]
        return value

    def varint(self, what: str) -> int:
        value, shift = 0, 0
        for _ in range(4):
            byte = self.byte(what)
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
        raise self.fail(f"{what}: variable byte integer longer than 4 bytes")

    def binary(self, what: str) -> bytes:
        return self.take(self.u16(what), what)

    def string(self, what: str) -> str:
        raw = self.binary(what)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{what} is not valid UTF-8") from None
        if "\x00" in text:  # MQTT-1.5.4-2
            raise self.fail(f"{what} contains U+0000")
        return text

    def remaining(self) -> int:
        return len(self.data) - self.pos

    def rest(self) -> bytes:
        return self.take(self.remaining(), "payload")

    def end(self) -> None:
        if self.pos != len(self.data):
            raise self.fail(f"{len(self.data) - self.pos} unexpected trailing bytes")

    def properties(self, allowed: frozenset[str]) -> dict[str, Any]:
        """An MQTT 5 property list; a property not allowed in this packet is a protocol
        error, a repeated one (other than user properties) too."""
        length = self.varint("property length")
        end = self.pos + length
        if end > len(self.data):
            raise self.fail("property length runs past the end of the packet")
        found: dict[str, Any] = {}
        while self.pos < end:
            ident = self.varint("property identifier")
            if ident not in PROPERTIES:
                raise self.fail(f"unknown property identifier 0x{ident:02x}")
            name, kind = PROPERTIES[ident]
            if name not in allowed:
                raise self.fail(f"property {name} is not allowed here", PROTOCOL_ERROR)
            value = self._value(kind, name)
            if kind == "p":
                found.setdefault(name, []).append(value)
            elif name == "subscription_id" and "subscription_id" in found:
                raise self.fail("property subscription_id repeated", PROTOCOL_ERROR)
            elif name in found:
                raise self.fail(f"property {name} repeated", PROTOCOL_ERROR)
            else:
                found[name] = value
        if self.pos != end:
            raise self.fail("a property runs past the property length")
        return found

    def _value(self, kind: str, name: str) -> Any:
        if kind == "b":
            return self.byte(name)
        if kind == "h":
            return self.u16(name)
        if kind == "i":
            return self.u32(name)
        if kind == "v":
            return self.varint(name)
        if kind == "s":
            return self.string(name)
        if kind == "d":
            return self.binary(name)
        return (self.string(name), self.string(name))


PUBLISH_PROPS = frozenset(
    {
        "payload_format",
        "message_expiry",
        "content_type",
        "response_topic",
        "correlation_data",
        "topic_alias",
        "user_property",
        "subscription_id",
    }
)
WILL_PROPS = (PUBLISH_PROPS - {"topic_alias", "subscription_id"}) | {"will_delay"}
CONNECT_PROPS = frozenset(
    {
        "session_expiry",
        "receive_maximum",
        "maximum_packet_size",
        "topic_alias_maximum",
        "request_response_info",
        "request_problem_info",
        "user_property",
        "auth_method",
        "auth_data",
    }
)
ACK_PROPS = frozenset({"reason_string", "user_property"})
DISCONNECT_PROPS = ACK_PROPS | {"session_expiry", "server_reference"}
# Flags the fixed header must carry for each type (MQTT-2.2.2-1); PUBLISH is checked apart.
REQUIRED_FLAGS = {PUBREL: 0b0010, SUBSCRIBE: 0b0010, UNSUBSCRIBE: 0b0010}
NAMES = {
    1: "CONNECT",
    2: "CONNACK",
    3: "PUBLISH",
    4: "PUBACK",
    5: "PUBREC",
    6: "PUBREL",
    7: "PUBCOMP",
    8: "SUBSCRIBE",
    9: "SUBACK",
    10: "UNSUBSCRIBE",
    11: "UNSUBACK",
    12: "PINGREQ",
    13: "PINGRESP",
    14: "DISCONNECT",
    15: "AUTH",
}
# Packets a client may send (a server's own packets from a client are protocol errors).
FROM_CLIENT = {1, 3, 4, 5, 6, 7, 8, 10, 12, 14, 15}


def check_topic_name(topic: str, where: str) -> None:
    """A topic to publish to: not empty, no wildcards (MQTT-3.3.2-2)."""
    if not topic:
        raise MalformedPacket(PROTOCOL_ERROR, f"{where}: empty topic name")
    if "+" in topic or "#" in topic:
        raise MalformedPacket(PROTOCOL_ERROR, f"{where}: wildcard in topic name {topic!r}")


def check_topic_filter(topic: str, where: str) -> None:
    """A subscription filter: `#` only last and alone in its level, `+` alone (4.7.1)."""
    if not topic:
        raise MalformedPacket(PROTOCOL_ERROR, f"{where}: empty topic filter")
    levels = topic.split("/")
    for i, level in enumerate(levels):
        if "#" in level and (level != "#" or i != len(levels) - 1):
            raise MalformedPacket(MALFORMED, f"{where}: misplaced '#' in {topic!r}")
        if "+" in level and level != "+":
            raise MalformedPacket(MALFORMED, f"{where}: misplaced '+' in {topic!r}")


class Decoder:
    """Splits a byte stream into packets; `version` is set by the CONNECT."""

    def __init__(self, max_packet_size: int) -> None:
        self.buffer = bytearray()
        self.max_packet_size = max_packet_size
        self.version = 0  # 4 = 3.1.1, 5 = 5.0; 0 until CONNECT

    def feed(self, data: bytes) -> list[Packet]:
        self.buffer += data
        packets: list[Packet] = []
        while True:
            try:
                header = self._header()
            except MalformedPacket as exc:
                exc.decoded = packets
                raise
            if header is None:
                return packets
            first, length, start = header
            body = bytes(self.buffer[start : start + length])
            del self.buffer[: start + length]
            try:
                packets.append(self._decode(first, body))
            except MalformedPacket as exc:
                exc.decoded = packets
                raise

    def _header(self) -> tuple[int, int, int] | None:
        """(first byte, remaining length, body offset) once the whole packet is here."""
        if len(self.buffer) < 2:
            return None
        length, shift = 0, 0
        for i in range(1, 5):
            if i >= len(self.buffer):
                return None
            byte = self.buffer[i]
            length |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        else:
            raise MalformedPacket(MALFORMED, "remaining length longer than 4 bytes")
        if 1 + i + length > self.max_packet_size:
            raise MalformedPacket(
                PACKET_TOO_LARGE,
                f"{NAMES.get(self.buffer[0] >> 4, 'packet')} of {1 + i + length} bytes"
                f" exceeds the limit of {self.max_packet_size}",
            )
        if len(self.buffer) < 1 + i + length:
            return None
        return self.buffer[0], length, 1 + i

    def _decode(self, first: int, body: bytes) -> Packet:
        kind, flags = first >> 4, first & 0x0F
        name = NAMES.get(kind, f"type {kind}")
        if kind not in FROM_CLIENT:
            raise MalformedPacket(PROTOCOL_ERROR, f"{name}: not a packet a client sends")
        if kind != PUBLISH and flags != REQUIRED_FLAGS.get(kind, 0):
            raise MalformedPacket(MALFORMED, f"{name}: reserved flags 0x{flags:x} in header")
        reader = Reader(body, name)
        if kind == CONNECT:
            return self._connect(reader)
        if self.version == 0:
            raise MalformedPacket(PROTOCOL_ERROR, f"{name} before CONNECT")
        if kind == PUBLISH:
            return self._publish(reader, flags)
        if kind in (PUBACK, PUBREC, PUBREL, PUBCOMP):
            return self._ack(reader, kind)
        if kind == SUBSCRIBE:
            return self._subscribe(reader)
        if kind == UNSUBSCRIBE:
            return self._unsubscribe(reader)
        if kind == PINGREQ:
            reader.end()
            return PingReq()
        if kind == DISCONNECT:
            reason, props = 0, {}
            if self.version == 5 and reader.remaining():
                reason = reader.byte("reason code")
                if reader.remaining():
                    props = reader.properties(DISCONNECT_PROPS)
            reader.end()
            return Disconnect(reason, props)
        raise MalformedPacket(PROTOCOL_ERROR, f"{name}: enhanced authentication not offered")

    def _connect(self, reader: Reader) -> Connect:
        if self.version:
            raise MalformedPacket(PROTOCOL_ERROR, "CONNECT: a second CONNECT")
        protocol = reader.string("protocol name")
        level = reader.byte("protocol level")
        if protocol != "MQTT":
            raise UnsupportedVersion(f"CONNECT: protocol name {protocol!r}, expected 'MQTT'")
        if level not in (4, 5):
            raise UnsupportedVersion(f"CONNECT: protocol level {level} (3.1.1 is 4, 5.0 is 5)")
        self.version = level
        flags = reader.byte("connect flags")
        if flags & 0x01:
            raise reader.fail("reserved connect flag set")
        will_flag, will_qos, will_retain = bool(flags & 0x04), (flags >> 3) & 3, bool(flags & 0x20)
        if will_qos == 3 or (not will_flag and (will_qos or will_retain)):
            raise reader.fail("will QoS/retain flags without a will, or will QoS 3")
        if level == 4 and flags & 0x40 and not flags & 0x80:
            raise reader.fail("password flag without user name flag (3.1.1)")
        keep_alive = reader.u16("keep alive")
        props = reader.properties(CONNECT_PROPS) if level == 5 else {}
        client_id = reader.string("client identifier")
        will = None
        if will_flag:
            will_props = reader.properties(WILL_PROPS) if level == 5 else {}
            topic = reader.string("will topic")
            check_topic_name(topic, "CONNECT will")
            will = Will(topic, reader.binary("will payload"), will_qos, will_retain, will_props)
        username = reader.string("user name") if flags & 0x80 else None
        password = reader.binary("password") if flags & 0x40 else None
        reader.end()
        return Connect(
            level, client_id, bool(flags & 0x02), keep_alive, username, password, will, props
        )

    def _publish(self, reader: Reader, flags: int) -> Publish:
        qos, retain, dup = (flags >> 1) & 3, bool(flags & 1), bool(flags & 8)
        if qos == 3:
            raise reader.fail("PUBLISH with QoS 3")
        if qos == 0 and dup:
            raise reader.fail("DUP flag on a QoS 0 PUBLISH")
        topic = reader.string("topic name")
        packet_id = reader.u16("packet identifier") if qos else 0
        if qos and packet_id == 0:
            raise reader.fail("packet identifier 0")
        props = reader.properties(PUBLISH_PROPS - {"subscription_id"}) if self.version == 5 else {}
        if not topic and "topic_alias" not in props:
            raise reader.fail("empty topic name without a topic alias", PROTOCOL_ERROR)
        if topic:
            check_topic_name(topic, "PUBLISH")
        if props.get("payload_format", 0) not in (0, 1):
            raise reader.fail("payload format indicator must be 0 or 1", PROTOCOL_ERROR)
        return Publish(topic, reader.rest(), qos, retain, packet_id, props, dup)

    def _ack(self, reader: Reader, kind: int) -> PubAck:
        packet_id = reader.u16("packet identifier")
        reason, props = 0, {}
        if self.version == 5 and reader.remaining():
            reason = reader.byte("reason code")
            if reader.remaining():
                props = reader.properties(ACK_PROPS)
        reader.end()
        return PubAck(kind, packet_id, reason, props)

    def _subscribe(self, reader: Reader) -> Subscribe:
        packet_id = reader.u16("packet identifier")
        allowed = frozenset({"subscription_id", "user_property"})
        props = reader.properties(allowed) if self.version == 5 else {}
        topics: list[tuple[str, int]] = []
        while reader.remaining():
            topic = reader.string("topic filter")
            options = reader.byte("subscription options")
            reserved = 0xC0 if self.version == 5 else 0xFC
            if options & reserved or options & 3 == 3 or (options >> 4) & 3 == 3:
                raise reader.fail(f"subscription options 0x{options:02x} for {topic!r}")
            check_topic_filter(topic, "SUBSCRIBE")
            topics.append((topic, options))
        if not topics:
            raise reader.fail("SUBSCRIBE without a topic filter", PROTOCOL_ERROR)
        return Subscribe(packet_id, topics, props)

    def _unsubscribe(self, reader: Reader) -> Unsubscribe:
        packet_id = reader.u16("packet identifier")
        props = reader.properties(frozenset({"user_property"})) if self.version == 5 else {}
        topics = []
        while reader.remaining():
            topic = reader.string("topic filter")
            check_topic_filter(topic, "UNSUBSCRIBE")
            topics.append(topic)
        if not topics:
            raise reader.fail("UNSUBSCRIBE without a topic filter", PROTOCOL_ERROR)
        return Unsubscribe(packet_id, topics, props)
