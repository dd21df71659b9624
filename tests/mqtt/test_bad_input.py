"""Bad input over raw sockets: each ends only its own connection, with the reason code
MQTT defines where it has one, and the gateway goes on serving."""

from __future__ import annotations

import socket
import struct
from typing import Any

import pytest

from tests.mqtt.conftest import GatewayProcess
from tests.support.mesh import Mesh

pytestmark = pytest.mark.slow


def utf8_field(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack(">H", len(raw)) + raw


def frame(first: int, body: bytes) -> bytes:
    assert len(body) < 128
    return bytes([first, len(body)]) + body


def connect_packet(user: str, password: str, level: int = 5) -> bytes:
    header = utf8_field("MQTT") + bytes([level, 0xC2]) + struct.pack(">H", 30)
    if level == 5:
        header += b"\x00"  # no properties
    return frame(0x10, header + utf8_field("raw") + utf8_field(user) + utf8_field(password))


def read_all(sock: socket.socket, timeout: float = 10) -> bytes:
    """Everything the gateway writes until it closes the connection."""
    sock.settimeout(timeout)
    data = bytearray()
    while chunk := sock.recv(4096):
        data += chunk
    return bytes(data)


def raw(gateway: GatewayProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", gateway.port), timeout=10)


def connected(gateway: GatewayProcess, mesh: Mesh) -> socket.socket:
    sock = raw(gateway)
    sock.sendall(connect_packet("device@iot", mesh.passwords["device@iot"]))
    connack = sock.recv(4096)
    assert connack[0] == 0x20 and connack[3] == 0, connack  # CONNACK, success
    return sock


def test_unsupported_protocol_level_gets_return_code_1(gateway: GatewayProcess) -> None:
    with raw(gateway) as sock:
        sock.sendall(connect_packet("device@iot", "x", level=3))
        assert read_all(sock) == b"\x20\x02\x00\x01"  # CONNACK, unacceptable protocol version


def test_publish_before_connect_closes_without_a_word(gateway: GatewayProcess) -> None:
    with raw(gateway) as sock:
        sock.sendall(frame(0x30, utf8_field("telemetry") + b"payload"))
        assert read_all(sock) == b""


def test_remaining_length_over_four_bytes_closes(gateway: GatewayProcess) -> None:
    with raw(gateway) as sock:
        sock.sendall(b"\x10\xff\xff\xff\xff\x7f")
        assert read_all(sock) == b""


@pytest.mark.parametrize(
    ("packet", "reason"),
    [
        # a PUBLISH announcing 1 MiB, beyond the 256 KiB limit: 0x95 packet too large
        (b"\x30\x80\x80\x40", 0x95),
        # a topic name that is not UTF-8: 0x81 malformed packet
        (frame(0x30, utf8_field(b"\xff\xfe") + b"x"), 0x81),
        # SUBSCRIBE with reserved header flags 0000 instead of 0010: malformed
        (frame(0x80, b"\x00\x01\x00" + utf8_field("telemetry") + b"\x00"), 0x81),
        # a second CONNECT: protocol error
        (connect_packet("device@iot", "x"), 0x82),
        # a PUBLISH with QoS 3: malformed
        (frame(0x36, utf8_field("telemetry") + b"\x00\x07\x00x"), 0x81),
    ],
    ids=["too-large", "bad-utf8", "reserved-flags", "second-connect", "qos3"],
)
def test_bad_packet_after_connect_gets_disconnect_with_reason(
    gateway: GatewayProcess, mqtt_mesh: Mesh, packet: bytes, reason: int
) -> None:
    with connected(gateway, mqtt_mesh) as sock:
        sock.sendall(packet)
        answer = read_all(sock)
        assert answer[:1] == b"\xe0", answer  # DISCONNECT
        assert answer[2] == reason, answer


def test_gateway_keeps_serving_after_bad_input_and_half_open_sockets(
    gateway: GatewayProcess, mqtt_mesh: Mesh, device_factory: Any
) -> None:
    idle = [raw(gateway) for _ in range(200)]  # connected, never a byte sent
    try:
        with raw(gateway) as sock:
            sock.sendall(b"\x10\x05garbage-and-more")
            read_all(sock)
        device = device_factory("device@iot")
        assert device.connect() == 0
    finally:
        for sock in idle:
            sock.close()
