"""Large messages: forwarded frame by frame, with qdrouterd's Q2 and Q3 hold-offs.

As qdrouterd 1.19 (src/router_node.c AMQP_rx_handler, src/message.c): a message is
buffered whole while it is small; once `Q2_UPPER` bytes of it have arrived still
incomplete, it is routed on what has arrived (the sections routing reads, header to
properties, must be among them) and its later bytes follow to the chosen links as they
come. Copies share one `Stream`; bytes every copy has handed to proton are dropped.

- Q2: when more than `Q2_UPPER` bytes of a message are buffered (not yet taken by
  every copy), the router stops reading it from proton (no `recv`) until they drop
  below `Q2_LOWER`. Proton then buffers what keeps arriving up to the session's incoming
  window, which `maxSessionFrames` bounds (enmesh.router.session_window); beyond it the
  sender waits.
- Q3: bytes are handed to an outgoing link only while its session holds less than
  `Q3_UPPER` unsent bytes (`pn_session_outgoing_bytes`), resuming below `Q3_LOWER`: a
  receiver that grants no session window, or a socket that does not drain, stops the
  copy there instead of in the router's memory.

So the router's own buffers for a stalled receiver are about Q2 + Q3 per message.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Protocol

BUFFER = 512  # qdrouterd's qd_buffer_t
Q2_UPPER, Q2_LOWER = 256 * BUFFER, 128 * BUFFER  # QD_QLIMIT_Q2_UPPER / _LOWER, in bytes
Q3_LOWER = 2 * 256 * BUFFER  # QD_QLIMIT_Q3_LOWER (Q2 upper x 2), in bytes
Q3_UPPER = 2 * Q3_LOWER
HEAD_LIMIT = 1 << 20  # the sections routing reads must arrive within this many bytes
SEND_CHUNK = 64 * 1024


class Parked(Protocol):
    def unpark(self) -> None: ...


# Links waiting for something that raises no proton event of its own: bytes arriving on
# another connection, proton's outgoing buffer draining. The router's idle hook runs
# them after each round of I/O (`run_parked`); one still blocked parks itself again.
_parked: dict[Parked, None] = {}


def park(item: Parked) -> None:
    _parked[item] = None


def run_parked() -> bool:
    """Let every parked link try again; True if there were any."""
    if not _parked:
        return False
    items = list(_parked)
    _parked.clear()
    for item in items:
        item.unpark()
    return True


@dataclass(eq=False, slots=True)
class Cursor:
    """How far one copy of a streaming message has been handed to its link."""

    sent: int = 0
    wake: Callable[[], None] | None = None  # the link sending it, told when bytes arrive


class Stream:
    """The bytes of one message after its routed prefix, while they are arriving."""

    live: ClassVar[set[Stream]] = set()  # every stream in progress (the /metrics gauge)

    def __init__(self, resume: Callable[[], None]) -> None:
        self._resume = resume  # the incoming link: read again (Q2 released)
        self.buffer = bytearray()
        self.base = 0  # stream offset of buffer[0]
        self.end = 0  # stream offset after the last byte received
        self.complete = False
        self.aborted = False
        self.held_off = False
        self.cursors: list[Cursor] = [Cursor()]  # the original, until routed
        Stream.live.add(self)

    @property
    def origin(self) -> Cursor:
        return self.cursors[0]

    @property
    def buffered(self) -> int:
        return self.end - self.base

    @property
    def done(self) -> bool:
        return self.complete or self.aborted

    def append(self, chunk: bytes) -> None:
        self.buffer += chunk
        self.end += len(chunk)
        self._trim()  # no copy left (all dropped): nothing to keep
        if self.buffered >= Q2_UPPER:
            self.held_off = True
        self._wake()

    def finish(self) -> None:
        self.complete = True
        self._wake()
        self._forget_if_idle()

    def abort(self) -> None:
        self.aborted = True
        self.buffer = bytearray()
        self.base = self.end
        self._wake()
        Stream.live.discard(self)

    def fork(self) -> Cursor:
        """A cursor for one more copy, from where `origin` is (multicast)."""
        cursor = Cursor(self.origin.sent)
        self.cursors.append(cursor)
        return cursor

    def read(self, cursor: Cursor, limit: int) -> bytes:
        """Up to `limit` bytes after `cursor`, which moves past them."""
        start = cursor.sent - self.base
        data = bytes(self.buffer[start : start + limit])
        cursor.sent += len(data)
        self._trim()
        return data

    def release(self, cursor: Cursor) -> None:
        """A copy is finished, aborted or dropped: its bytes need not be kept for it."""
        cursor.wake = None
        if cursor in self.cursors:
            self.cursors.remove(cursor)
            self._trim()
        self._forget_if_idle()

    def _trim(self) -> None:
        low = min((c.sent for c in self.cursors), default=self.end)
        if low > self.base:
            del self.buffer[: low - self.base]
            self.base = low
        if self.held_off and self.buffered < Q2_LOWER:
            self.held_off = False
            self._resume()

    def _wake(self) -> None:
        for cursor in list(self.cursors):
            if cursor.wake is not None:
                cursor.wake()

    def _forget_if_idle(self) -> None:
        if self.done and not self.cursors:
            Stream.live.discard(self)


def buffered_bytes() -> int:
    """Bytes of messages in progress the router holds itself (not counting proton's)."""
    return sum(stream.buffered for stream in Stream.live)
