"""The AMQP bytes of a plain MQTT message, written and read without proton's Message.

Most MQTT traffic is a topic and a payload. Building a proton `Message` to encode one,
and another to decode it on the way to a subscriber, cost the gateway more CPU than the
rest of the message's path together (a pn_message, its Data objects, the Python side of
every field). So a PUBLISH with none of the MQTT 5 properties AMQP has fields for is
written here directly, byte for byte what proton writes for `Message(body=payload,
address=topic, durable=qos > 0)` (tests/unit/test_amqp_bytes.py compares the two), and a
message from the mesh whose body is a single binary, string or null value (or one data
section) is read here; anything else goes through proton's Message as before
(enmesh.mqtt.convert).
"""

from __future__ import annotations

import struct

from enmesh.router import sections

_HEADER_DURABLE = b"\x00\x53\x70\xc0\x02\x01\x41"  # header: list [durable=true]
_HEADER_EMPTY = b"\x00\x53\x70\x45"  # header: list0
_PROPERTIES = b"\x00\x53\x73"
_NULL2 = b"\x40\x40"  # message-id, user-id: null
_AMQP_VALUE = b"\x00\x53\x77"
_BODY_AMQP_VALUE, _BODY_DATA, _BODY_SEQUENCE = 0x77, 0x75, 0x76
_APPLICATION_PROPERTIES, _FOOTER = 0x74, 0x78
_BINARY, _STRING, _NULL = (0xA0, 0xB0), (0xA1, 0xB1), 0x40
_PLAIN_PROPERTIES = 3  # message-id, user-id, to: what a plain message's properties hold


def encode_publish(topic: str, payload: bytes, durable: bool) -> bytes:
    """A message with `payload` as its amqp-value binary body, `to` = `topic`."""
    to = _variable(topic.encode("utf-8"), 0xA1, 0xB1)
    fields = _NULL2 + to
    if len(fields) + 1 <= 0xFF:
        properties = struct.pack(">BBB", 0xC0, len(fields) + 1, _PLAIN_PROPERTIES) + fields
    else:
        properties = struct.pack(">BII", 0xD0, len(fields) + 4, _PLAIN_PROPERTIES) + fields
    header = _HEADER_DURABLE if durable else _HEADER_EMPTY
    body = _variable(payload, 0xA0, 0xB0)
    return b"".join((header, _PROPERTIES, properties, _AMQP_VALUE, body))


def _variable(value: bytes, code8: int, code32: int) -> bytes:
    if len(value) <= 0xFF:
        return struct.pack(">BB", code8, len(value)) + value
    return struct.pack(">BI", code32, len(value)) + value


def plain_payload(data: bytes, *, properties_matter: bool) -> bytes | None:
    """The payload of a message with a plain body (one binary, string or null value, or
    one data section): what an MQTT subscriber gets. None: read it with proton instead
    (another body, application properties or more properties when they matter (MQTT 5:
    they become MQTT properties), or bytes this reader does not take)."""
    try:
        return _plain_payload(memoryview(data), properties_matter)
    except (IndexError, struct.error, sections.MalformedMessageError):
        return None


def _plain_payload(data: memoryview, properties_matter: bool) -> bytes | None:
    position, payload = 0, b""
    seen_body = False
    while position < len(data):
        if data[position] != 0x00:
            return None
        code, value_at = sections.descriptor(data, position + 1)
        end = sections.skip(data, value_at)
        if code == sections.PROPERTIES and properties_matter:
            if sections.compound(data, value_at)[0] > _PLAIN_PROPERTIES:
                return None
        elif code == _APPLICATION_PROPERTIES and properties_matter:
            return None
        elif code in (_BODY_AMQP_VALUE, _BODY_DATA, _BODY_SEQUENCE):
            if seen_body or code == _BODY_SEQUENCE:
                return None  # several body sections, or a sequence: proton's reading
            seen_body = True
            value = data[value_at]
            if value == _NULL and code == _BODY_AMQP_VALUE:
                payload = b""
            elif value in _BINARY or (value in _STRING and code == _BODY_AMQP_VALUE):
                start, stop = sections.extent(data, value_at)
                payload = bytes(data[start:stop])
            else:
                return None
        elif code not in (
            sections.HEADER,
            sections.DELIVERY_ANNOTATIONS,
            sections.MESSAGE_ANNOTATIONS,
            sections.PROPERTIES,
            _APPLICATION_PROPERTIES,
            _FOOTER,
        ):
            return None
        position = end
    return payload
