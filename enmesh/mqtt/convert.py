"""MQTT PUBLISH <-> AMQP message: payload and the MQTT 5 properties AMQP has fields for.

The gateway carries messages as their encoded bytes: a plain one is written and read
without proton's Message (enmesh.mqtt.amqp_bytes), the rest through it.
"""

from __future__ import annotations

from typing import Any

from cproton import pn_message_get_content_type as _message_content_type  # type: ignore[import-untyped]
from proton import Message

from enmesh.mqtt import amqp_bytes
from enmesh.mqtt.packets import Publish

# The MQTT 5 properties that become AMQP fields (to_amqp); without them a PUBLISH is plain.
_MAPPED_PROPERTIES = frozenset(
    ("content_type", "response_topic", "correlation_data", "message_expiry", "user_property")
)


def encode(publish: Publish) -> bytes:
    """An MQTT PUBLISH as the bytes of its AMQP message (to_amqp's message, encoded)."""
    if _MAPPED_PROPERTIES.isdisjoint(publish.props):
        return amqp_bytes.encode_publish(publish.topic, publish.payload, publish.qos > 0)
    return to_amqp(publish).encode()


def decode(topic: str, data: bytes, qos: int, packet_id: int, version: int) -> Publish:
    """The PUBLISH for an MQTT subscriber of `version` from an AMQP message's bytes."""
    payload = amqp_bytes.plain_payload(data, properties_matter=version == 5)
    if payload is not None:
        return Publish(topic, payload, qos, False, packet_id, {})
    message = Message()
    message.decode(data)
    return from_amqp(topic, message, qos, packet_id, version)


def to_amqp(publish: Publish) -> Message:
    """An MQTT PUBLISH as an AMQP message: the payload as a binary body, MQTT 5's
    properties where AMQP has a field for them, user properties as application
    properties."""
    message = Message(body=publish.payload, address=publish.topic, durable=publish.qos > 0)
    props = publish.props
    if "content_type" in props:
        message.content_type = props["content_type"]
    if "response_topic" in props:
        message.reply_to = props["response_topic"]
    if "correlation_data" in props:
        message.correlation_id = props["correlation_data"]
    if "message_expiry" in props:
        message.ttl = float(props["message_expiry"])
    if "user_property" in props:
        message.properties = dict(props["user_property"])  # type: ignore[assignment]
    return message


def from_amqp(topic: str, message: Message, qos: int, packet_id: int, version: int) -> Publish:
    body = message.body
    if body is None:
        payload = b""
    elif isinstance(body, bytes | memoryview):
        payload = bytes(body)
    elif isinstance(body, str):
        payload = body.encode("utf-8")
    else:
        payload = repr(body).encode("utf-8")  # an AMQP value with no MQTT form: its text
    props: dict[str, Any] = {}
    if version == 5:
        content_type = _content_type(message)
        if content_type:
            props["content_type"] = content_type
        if message.reply_to:
            props["response_topic"] = message.reply_to
        if isinstance(message.correlation_id, bytes | str):
            cid = message.correlation_id
            props["correlation_data"] = cid.encode() if isinstance(cid, str) else bytes(cid)
        if message.properties:
            props["user_property"] = [(str(k), str(v)) for k, v in message.properties.items()]
    return Publish(topic, payload, qos, False, packet_id, props)


def _content_type(message: Message) -> str | None:
    """The message's content type, None when it has none: proton-python's
    `Message.content_type` makes a missing one the symbol 'None'."""
    value: str | None = _message_content_type(message._msg)
    return value
