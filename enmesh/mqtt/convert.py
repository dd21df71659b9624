"""MQTT PUBLISH <-> AMQP message: payload and the MQTT 5 properties AMQP has fields for."""

from __future__ import annotations

from typing import Any

from proton import Message

from enmesh.mqtt.packets import Publish


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
        if message.content_type:
            props["content_type"] = str(message.content_type)
        if message.reply_to:
            props["response_topic"] = message.reply_to
        if isinstance(message.correlation_id, bytes | str):
            cid = message.correlation_id
            props["correlation_data"] = cid.encode() if isinstance(cid, str) else bytes(cid)
        if message.properties:
            props["user_property"] = [(str(k), str(v)) for k, v in message.properties.items()]
    return Publish(topic, payload, qos, False, packet_id, props)
