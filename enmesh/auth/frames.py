"""The few AMQP 1.0 frames a SASL relay and an authentication service speak by hand.

proton's Python binding runs SASL through Cyrus only: it cannot hand a client's SASL
exchange to another server, nor check a password against Keycloak. Both ends of
qdrouterd's `authServicePlugin` protocol therefore read and write the SASL frames
(AMQP 1.0 part 5.3) and the open/close that follow themselves; proton's `Data` still
does every encoding and decoding of the frame bodies.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any, cast

from proton import UNDESCRIBED, Array, Data, Described, symbol, ulong

SASL_HEADER = b"AMQP\x03\x01\x00\x00"
AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
AMQP_FRAME, SASL_FRAME = 0, 1
SASL_MECHANISMS, SASL_INIT, SASL_CHALLENGE, SASL_RESPONSE, SASL_OUTCOME = range(0x40, 0x45)
OPEN, CLOSE = 0x10, 0x18
# sasl-code (part 5.3.3.6)
OK, AUTH, SYS, SYS_PERM, SYS_TEMP = range(5)

_HEADER = struct.Struct(">IBBH")  # size, data offset (4-byte words), type, channel
MAX_FRAME = 64 * 1024  # far above any SASL or open frame this exchange carries


class FrameError(ValueError):
    """Bytes that are not the frame or header the exchange expects."""


@dataclass(frozen=True)
class Frame:
    kind: int  # AMQP_FRAME or SASL_FRAME
    code: int  # the performative's descriptor
    fields: list[Any] = field(default_factory=list)

    def field(self, index: int, default: Any = None) -> Any:
        return self.fields[index] if index < len(self.fields) else default


def symbols(*names: str) -> Array:
    """An AMQP array of symbols (mechanisms, capabilities)."""
    return Array(cast(Any, UNDESCRIBED), Data.SYMBOL, *map(symbol, names))


def strings(*values: str) -> Array:
    """An AMQP array of strings (qdrouterd reads address-authz permissions as one)."""
    return Array(cast(Any, UNDESCRIBED), Data.STRING, *values)


def encode(kind: int, code: int, fields: list[Any]) -> bytes:
    """One frame on channel 0: `fields` is the performative's list."""
    data = Data()
    data.put_object(Described(ulong(code), fields))
    body = bytes(data.encode())
    return _HEADER.pack(_HEADER.size + len(body), 2, kind, 0) + body


def _decode_body(body: bytes, kind: int) -> Frame:
    data = Data()
    try:
        data.decode(body)
        data.rewind()
        data.next()
        value = data.get_object()
    except Exception as exc:  # proton's DataException and decode errors
        raise FrameError(f"undecodable frame body: {exc}") from exc
    if not isinstance(value, Described) or not isinstance(value.descriptor, int):
        raise FrameError("frame body is not a described performative")
    fields = value.value if isinstance(value.value, list) else []
    return Frame(kind, int(value.descriptor), [_plain(v) for v in fields])


def _plain(value: Any) -> Any:
    """proton gives binaries as memoryviews; callers want bytes."""
    return bytes(value) if isinstance(value, memoryview) else value


class FrameReader:
    """Feed it bytes as they arrive; it yields protocol headers (bytes) and Frames."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> list[bytes | Frame]:
        self._buffer += data
        items: list[bytes | Frame] = []
        while True:
            item = self._next()
            if item is None:
                return items
            if isinstance(item, Frame) or item:
                items.append(item)

    def rest(self) -> bytes:
        """What arrived after the last item: handed on once the exchange is over."""
        rest, self._buffer = self._buffer, b""
        return rest

    def _next(self) -> bytes | Frame | None:
        buf = self._buffer
        if len(buf) < 8:
            return None
        if buf[:4] == b"AMQP":
            self._buffer = buf[8:]
            return buf[:8]
        size, offset, kind, _channel = _HEADER.unpack_from(buf)
        if size < 8 or offset < 2 or offset * 4 > size or size > MAX_FRAME:
            raise FrameError(f"bad frame header (size {size}, data offset {offset})")
        if len(buf) < size:
            return None
        self._buffer = buf[size:]
        if size == offset * 4:
            return b""  # an empty frame (heartbeat): nothing to report
        return _decode_body(buf[offset * 4 : size], kind)
