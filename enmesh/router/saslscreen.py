"""A screen on a client's SASL frames, before proton (and Cyrus SASL) sees them.

proton 0.40 hands a sasl-response to Cyrus whenever one arrives in the SASL layer
(sasl.c `pn_do_response`), without checking that a sasl-init started the exchange.
Cyrus' `sasl_server_step` then runs on a connection that `sasl_server_start` never
set up and dereferences its NULL mechanism: one unauthenticated 30-byte write (the
SASL header, then a sasl-response) kills the router with SIGSEGV. A sasl-init sets
proton's state so that later responses are either expected (a challenge is out) or
not dispatched at all, so the screen refuses a response before the init, and a second
init (AMQP 1.0 part 5.3.2 allows one).

The screen reads plaintext only: inside TLS (amqps) the SASL frames are encrypted
and proton decrypts them itself, so there this stays proton's bug (see docs/router.md).
"""

from __future__ import annotations

import struct

SASL_HEADER = b"AMQP\x03\x01\x00\x00"
_INIT, _RESPONSE = 0x41, 0x43
_FRAME_HEADER = struct.Struct(">IB")  # size, data offset (in 4-byte words)
_LONGEST_DESCRIPTOR = 10  # 0x00 0x80 and an 8-byte ulong


class SaslInputScreen:
    """Feed it every chunk a client sends, in order, until `done`."""

    def __init__(self) -> None:
        self.done = False
        self._header_seen = False
        self._init_seen = False
        self._partial = b""  # the start of a header or frame, until it is complete
        self._skip = 0  # bytes of the current frame still to come

    def feed(self, data: bytes) -> str | None:
        """A reason to drop the connection, or None."""
        if self.done:
            return None
        buf, pos = self._partial + data, 0
        while pos < len(buf) and not self.done:
            if self._skip:
                step = min(self._skip, len(buf) - pos)
                pos, self._skip = pos + step, self._skip - step
                continue
            if not self._header_seen:
                if len(buf) - pos < len(SASL_HEADER):
                    break
                # Not SASL (TLS, or AMQP without SASL): nothing here for the screen.
                self.done = buf[pos : pos + len(SASL_HEADER)] != SASL_HEADER
                self._header_seen, pos = True, pos + len(SASL_HEADER)
                continue
            consumed = self._frame(buf, pos)
            if isinstance(consumed, str):
                return consumed
            if consumed == 0:
                break
            pos += consumed
        self._partial = b"" if self.done else buf[pos:]
        return None

    def _frame(self, buf: bytes, pos: int) -> int | str:
        """Check the frame at `pos`: bytes to consume (0: wait for more) or a refusal."""
        if buf[pos : pos + 4] == b"AMQP"[: len(buf) - pos]:
            if len(buf) - pos < 4:
                return 0
            self.done = True  # the AMQP header: the SASL layer is over
            return 0
        if len(buf) - pos < _FRAME_HEADER.size:
            return 0
        size: int
        offset: int
        size, offset = _FRAME_HEADER.unpack_from(buf, pos)
        body = offset * 4
        if size < 8 or body < 8 or body > size:
            self.done = True  # proton refuses the frame itself (framing error)
            return 0
        code = _code(buf[pos + body : pos + min(size, body + _LONGEST_DESCRIPTOR)])
        if code is None and len(buf) - pos < min(size, body + _LONGEST_DESCRIPTOR):
            return 0  # the descriptor has not arrived yet
        if code == _RESPONSE and not self._init_seen:
            return "SASL protocol error: sasl-response before sasl-init"
        if code == _INIT:
            if self._init_seen:
                return "SASL protocol error: a second sasl-init"
            self._init_seen = True
        available = len(buf) - pos
        self._skip = max(size - available, 0)
        return min(size, available)


def _code(descriptor: bytes) -> int | None:
    """The ulong descriptor code of a performative (proton dispatches on nothing else)."""
    if descriptor[:2] == b"\x00\x53" and len(descriptor) >= 3:
        return descriptor[2]
    if descriptor[:2] == b"\x00\x80" and len(descriptor) >= 10:
        code: int = struct.unpack_from(">Q", descriptor, 2)[0]
        return code
    if descriptor[:2] == b"\x00\x44":
        return 0
    return None
