"""Deliveries through one router: encoded bytes in, destinations chosen, settlement back.

What an InLink (enmesh.router.inlinks) receives is `Held` until a destination takes it.
An OutLink sends when its peer gives credit and remembers every unsettled delivery's
origin, so the consumer's outcome (accepted, rejected, released, modified) reaches the
producer unchanged, and a lost link releases what was in flight instead of dropping it.

Message bytes are never decoded or re-encoded here.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from proton import Delivery, Disposition, Sender, Terminus

from enmesh.router import annotations as qd_annotations
from enmesh.router import rawproton, streaming, tally
from enmesh.router.annotations import Annotations
from enmesh.router.outcomes import FAILED, Fanout, Outcome
from enmesh.router.streaming import Cursor, Stream

if TYPE_CHECKING:
    from enmesh.router.inlinks import InLink

RELEASED = Disposition.RELEASED
ACCEPTED = Disposition.ACCEPTED


@dataclass(eq=False, slots=True)
class Held:
    """A message the router holds: its bytes and, if unsettled, where its outcome goes."""

    data: bytes  # the whole message, or the routed prefix of one still arriving
    origin: InLink | None  # None for copies made by multicast
    delivery: Delivery | None  # the inbound delivery to settle; None if presettled
    key: str | None = None  # anonymous relay: the routing key its `to` resolved to
    ann: Annotations | None = None  # where its annotations are; None: not looked at
    stream: Stream | None = None  # the rest of a large message, as it arrives
    cursor: Cursor | None = None  # how much of `stream` this copy has sent
    fanout: Fanout | None = None  # an unsettled multicast copy: where its outcome goes

    @property
    def presettled(self) -> bool:
        return self.delivery is None and self.fanout is None

    def copy(self, fanout: Fanout | None) -> Held:
        """A multicast copy: the same bytes, its own place in the stream and outcome."""
        if fanout is not None:
            fanout.add_copy()
        cursor = self.stream.fork() if self.stream is not None else None
        return Held(
            self.data, None, None, ann=self.ann, stream=self.stream, cursor=cursor, fanout=fanout
        )

    def release_stream(self) -> None:
        """This copy will send no more of its stream."""
        if self.stream is not None and self.cursor is not None:
            self.stream.release(self.cursor)
            self.cursor = None

    def settle_with(self, outcome: Outcome) -> None:
        self.settle_origin(outcome.state, outcome)

    def settle_origin(self, state: int, source: Outcome | None = None) -> None:
        """Give the producer side the outcome (`source`: a consumer's, when there is one)."""
        if self.fanout is not None:
            fanout, self.fanout = self.fanout, None
            fanout.copy_settled(
                source or (FAILED if state == Disposition.MODIFIED else Outcome(state))
            )
            return
        self.release_stream()  # settled: its remaining bytes are wanted by no one
        inbound = self.delivery
        if inbound is None:
            return
        if self.origin is not None and self.origin.defer(self, state, source):
            return  # settled once its last byte is in (InLink._more)
        self.delivery = None
        if self.origin is not None and self.origin.closed:
            return  # the producer's link is gone; its engine already forgot the delivery
        if source is not None and not (
            self.origin is not None
            and self.origin.modified_as_released
            and source.state == Disposition.MODIFIED
        ):
            source.apply(inbound)
        elif source is None and state == Disposition.MODIFIED:
            _failed(inbound, self.origin)
        else:
            inbound.update(RELEASED if source is not None else state)
        if self.origin is not None:
            count_outcome(self.origin, rawproton.local_state(inbound))
        rawproton.delivery_settle(inbound._impl)


def count_outcome(counted: OutLink | InLink, state: int) -> None:
    """Count a terminal outcome on a link (what its peer or the router settled with)."""
    if state == ACCEPTED:
        counted.accepted += 1
    elif state == Disposition.REJECTED:
        counted.rejected += 1
    elif state == RELEASED:
        counted.released += 1
    elif state == Disposition.MODIFIED:
        counted.modified += 1


class OutLink:
    """A link the router sends on: to a consumer, a broker, or the next router."""

    _tags = itertools.count(1)

    def __init__(self, link: Sender, key: str, capacity: int, presettle: bool = False) -> None:
        self.link = link
        self.key = key
        self.capacity = capacity
        self.presettle = presettle  # multicast: copies go out settled
        self.waiting: deque[Held] = deque()
        # Keyed by tag: the bytes of a number, unique on this link.
        self.unsettled: dict[bytes, tuple[Delivery, Held]] = {}
        self.delivered = 0
        self.last_delivery: float | None = None  # monotonic; management's lastDlvSeconds
        self.accepted = 0
        self.rejected = 0
        self.released = 0
        self.modified = 0
        self.dropped = 0
        self.presettled = 0
        # Where the address counts what this link sends (enmesh.router.tally).
        self.tally, self.slot = tally.NOWHERE, 0
        self.closed = False
        self.hop: str | None = None  # transit links: the neighbour they leave through
        # This router's encoded id to add to ingress/trace (next routers, clients that keep
        # annotations); None: the router's annotations are stripped (see annotations.py).
        self.trace_as: bytes | None = None
        self.retiring = False  # transit links no longer used, closed once settled
        # A large message being sent while it arrives (tag, delivery, message): no other
        # delivery can start on the link until it is complete (enmesh.router.streaming).
        self.current: tuple[bytes, Delivery, Held] | None = None
        self.q3_blocked = False
        link.enmesh_out = self

    @property
    def outstanding(self) -> int:
        return len(self.waiting) + len(self.unsettled)

    @property
    def free(self) -> int:
        """How many more messages this link can take now without queueing beyond credit."""
        return rawproton.link_credit(self.link._impl) - len(self.waiting)  # type: ignore[no-any-return]

    def offer(self, held: Held) -> None:
        """Queue a message and send what credit allows."""
        self.waiting.append(held)
        self.pump()

    def pump(self) -> int:
        sent = 0
        link = self.link._impl
        while not self.closed:
            if self.current is not None and not self._feed():
                break  # a large message is still on its way through this link
            if not (self.waiting and rawproton.link_credit(link) > 0):
                break
            held = self.waiting.popleft()
            if held.delivery is not None and held.origin is not None and held.origin.closed:
                held.release_stream()
                continue  # its producer or broker is gone and will redeliver it: no duplicate
            if held.stream is not None and held.stream.aborted:
                held.release_stream()
                continue  # its producer aborted it before it started here
            tag = b"%d" % next(self._tags)
            delivery = rawproton.new_delivery(self.link, tag)
            rawproton.send(link, qd_annotations.outgoing(held.data, held.ann, self.trace_as))
            self.delivered += 1
            sent += 1
            if not (self.presettle or held.presettled):
                self.unsettled[tag] = (delivery, held)
            if held.stream is None:
                self._sent(delivery, held)
                continue
            self.current = (tag, delivery, held)
            if held.cursor is not None:
                held.cursor.wake = functools.partial(streaming.park, self)
        if sent:
            self.tally[self.slot] += sent
            self.last_delivery = time.monotonic()
        return sent

    def _sent(self, delivery: Delivery, held: Held) -> None:
        """The whole message is with proton: end the delivery (settle it if presettled)."""
        rawproton.link_advance(self.link._impl)
        if self.presettle or held.presettled:
            self.presettled += 1
            delivery.settle()
            if held.delivery is not None:  # an unsettled message sent as a copy
                held.settle_origin(ACCEPTED)

    def _feed(self) -> bool:
        """Hand the current streaming delivery what has arrived; True once it is over.

        Q3: no more than `Q3_UPPER` unsent bytes in the session (a stalled receiver).
        """
        assert self.current is not None
        tag, delivery, held = self.current
        stream, cursor = held.stream, held.cursor
        assert stream is not None and cursor is not None
        if stream.aborted:  # the producer aborted: so do we, and no outcome is owed
            self.current = None
            held.release_stream()
            self.unsettled.pop(tag, None)
            delivery.abort()
            return True
        session = self.link.session
        limit = streaming.Q3_LOWER if self.q3_blocked else streaming.Q3_UPPER
        while cursor.sent < stream.end:
            if session.outgoing_bytes >= limit:
                self.q3_blocked = True
                streaming.park(self)  # nothing tells us when proton's buffer drains
                return False
            limit = streaming.Q3_UPPER
            self.q3_blocked = False
            self.link.send(stream.read(cursor, streaming.SEND_CHUNK))
        self.q3_blocked = False
        if not stream.complete:
            return False  # woken (parked) when more arrives
        self.current = None
        held.release_stream()
        self._sent(delivery, held)
        return True

    def unpark(self) -> None:
        if not self.closed:
            self.pump()

    def on_disposition(self, tag: bytes) -> None:
        """The consumer updated the delivery tagged `tag` (proton's event for it)."""
        entry = self.unsettled.get(tag)
        if entry is None:
            return
        delivery, held = entry
        state = rawproton.remote_state(delivery)
        if rawproton.delivery_settled(delivery._impl) or state in (
            ACCEPTED,
            Disposition.REJECTED,
            RELEASED,
            Disposition.MODIFIED,
        ):
            count_outcome(self, state)
            held.settle_origin(state, Outcome.of(delivery, state))
            del self.unsettled[tag]
            if self.current is not None and self.current[0] == tag:
                # Settled before it was all sent: the rest is not wanted.
                self.current = None
                held.release_stream()
                delivery.abort()
                self.pump()
            else:
                delivery.settle()

    def lost(self) -> list[Held]:
        """The link is gone: what was in flight may or may not have been processed, so its
        producer gets `modified` with delivery-failed (qdrouterd 1.19's
        qdr_link_cleanup_deliveries_CT); return what never left, to be re-routed."""
        self.closed = True
        if self.current is not None:
            self.current[2].release_stream()
            self.current = None
        for delivery, held in self.unsettled.values():
            held.settle_origin(Disposition.MODIFIED)
            with contextlib.suppress(Exception):  # the engine may already have freed it
                delivery.settle()
        self.unsettled.clear()
        unsent = []
        for held in self.waiting:
            if not held.presettled or held.origin is not None:
                unsent.append(held)
            else:
                held.release_stream()  # a presettled copy, dropped
        self.waiting.clear()
        return unsent


def _failed(inbound: Delivery, origin: InLink | None) -> None:
    """Modified, delivery-failed: in doubt (a broker that ends sessions on it: released)."""
    if origin is not None and origin.modified_as_released:
        inbound.update(RELEASED)
        return
    inbound.local.failed = True
    inbound.update(Disposition.MODIFIED)


@dataclass
class AddressState:
    """Everything this router knows locally about one routing key."""

    key: str
    distribution: str = "balanced"
    consumers: list[OutLink] = field(default_factory=list)
    producers: list[InLink] = field(default_factory=list)
    # Deliveries in and out by peer (enmesh.router.tally): kept while the address is known.
    counts: list[int] = field(default_factory=tally.zeros)

    @property
    def idle(self) -> bool:
        return not self.consumers and not self.producers


def choose_balanced(candidates: list[OutLink]) -> OutLink | None:
    """Least outstanding deliveries among links that can take one now."""
    best: OutLink | None = None
    for out in candidates:
        if out.free > 0 and not out.closed and (best is None or out.outstanding < best.outstanding):
            best = out
    return best


def set_address(terminus: Terminus, address: str | None) -> None:
    """Set a terminus address; None is valid AMQP (no address) though proton's stub omits it."""
    terminus.address = address  # type: ignore[assignment]
