"""The receiving side of a router: links it takes messages on, and the credit it grants.

An InLink receives; it grants credit only while its address has a reachable
destination, never more than `capacity` minus what it already holds (for stored messages
from a broker, never more than the destinations asked for), and takes credit back (a
negative flow) when the last destination goes. A large message is routed on its first
bytes and follows as it arrives (enmesh.router.streaming). What it receives becomes a
`Held` (enmesh.router.forwarding), offered to destinations by its `route`.

Message bytes are never decoded or re-encoded here.
"""

from __future__ import annotations

import functools
import time
from collections import deque
from collections.abc import Callable

from proton import Condition, Delivery, Disposition, Receiver

from enmesh.router import annotations as qd_annotations
from enmesh.router import rawproton, streaming, tally
from enmesh.router.annotations import AnnotationError, Annotations
from enmesh.router.forwarding import RELEASED, Held
from enmesh.router.outcomes import Outcome
from enmesh.router.sections import MalformedMessageError, head_complete
from enmesh.router.streaming import Stream


class InLink:
    """A link the router receives on: from a producer, a broker, or the previous router."""

    def __init__(
        self,
        link: Receiver,
        key: str,
        capacity: int,
        route: Callable[[Held], bool],
        destination_router: str | None = None,
    ) -> None:
        self.link = link
        self.key = key
        self.capacity = capacity
        self.route = route
        self.destination_router = destination_router  # for transit links from other routers
        self.held: deque[Held] = deque()
        # A link has at most one multi-frame delivery in progress; its bytes so far.
        # (Tags are not used: peers may send binary tags that proton cannot decode.)
        self.partial: bytearray | None = None
        self.received = 0
        self.last_delivery: float | None = None  # monotonic; management's lastDlvSeconds
        # What the router settled with the sender, and how; where the address counts it.
        self.accepted = self.rejected = self.released = self.modified = 0
        self.presettled = 0
        self.tally, self.slot = tally.NOWHERE, 0
        self.closed = False
        self.routable = False
        # Multicast: how many more copies the slowest destination can queue right now.
        self.room: Callable[[], int] | None = None
        # Stored messages (from a broker): how many the destinations asked for right now,
        # and what to do when it holds messages they want none of (demand.give_back_later).
        self.demand: Callable[[], int] | None = None
        self.unwanted: Callable[[], None] | None = None
        self.give_back_due = False
        self.release_due = False  # a transit link's path went: held ones go back unless it returns
        # RabbitMQ 3.10 ends the session on a `modified` outcome; brokers get `released`.
        self.modified_as_released = False
        # Router annotations coming in: True: ignored (stripAnnotations in/both); False:
        # kept and checked; None: not looked at (link routes, brokers).
        self.strip_in: bool | None = None
        # A large message routed on its first bytes while the rest arrives (its delivery,
        # its stream, the routed message), or read to its end to be refused; an outcome
        # that came before its last byte (enmesh.router.streaming).
        self.arriving: Delivery | None = None
        self.stream: Stream | None = None
        self.streamed: Held | None = None
        self.refusal: Exception | None = None
        self.deferred: tuple[int, Outcome | None] | None = None
        link.enmesh_in = self

    def on_delivery(self) -> None:
        """Read what has arrived, delivery after delivery.

        Proton's `recv` reads the link's current delivery, which is not always the event's:
        a later delivery can arrive whole while an earlier one is held off (Q2), and then
        raises no event of its own. So work through `link.current` until one is still
        arriving or held.
        """
        while (current := rawproton.current(self.link)) is not None and self._take(current):
            pass

    def _take(self, delivery: Delivery) -> bool:
        """Read `delivery` (the link's current one); True once the link advanced past it."""
        if self.closed:  # sent before the peer saw that we let the link go: give it back
            self.link.recv(delivery.pending)
            if delivery.partial:
                return False
            self.link.advance()
            if not delivery.settled:
                delivery.update(RELEASED)
            delivery.settle()
            return True
        impl = delivery._impl
        if rawproton.delivery_aborted(impl):
            self._aborted(delivery)
            return True
        if not rawproton.delivery_readable(impl):
            return False
        if self.stream is not None and self.stream.held_off:
            return False  # Q2: proton keeps the bytes, and its session window closes behind them
        link, pending = self.link._impl, rawproton.delivery_pending(impl)
        if self.arriving is not None:
            # No more than Q2 allows: the rest stays with proton (bounded by the session
            # window) until the copies have taken what the router holds.
            room = streaming.Q2_UPPER - self.stream.buffered if self.stream else pending
            return self._more(delivery, rawproton.receive(link, max(room, 1)))
        chunk = rawproton.receive(link, pending)
        if rawproton.delivery_partial(impl):
            if self.partial is None:
                self.partial = bytearray()
            self.partial += chunk  # in place: a long message must not copy itself per frame
            if len(self.partial) >= streaming.Q2_UPPER:
                self._start_stream(delivery)
            return False
        buffered, self.partial = self.partial, None
        data = bytes(buffered + chunk) if buffered is not None else chunk
        rawproton.link_advance(link)
        presettled = self._count(delivery)
        if presettled:
            # The sender has forgotten it, so must we: without a local settle proton
            # keeps every presettled delivery for the link's lifetime (~1.3 KB each).
            delivery.settle()
        found = self._annotations(data)
        if isinstance(found, Exception):
            _refuse_message(delivery, presettled, found)
            self.refresh()
            return True
        self._route_new(Held(data, self, None if presettled else delivery, ann=found))
        return True

    def _count(self, delivery: Delivery) -> bool:
        """Count a new delivery; is it presettled?"""
        self.received += 1
        self.last_delivery = time.monotonic()
        self.tally[self.slot] += 1
        if rawproton.delivery_settled(delivery._impl):
            self.presettled += 1
            return True
        return False

    def _annotations(self, data: bytes) -> Annotations | Exception | None:
        """Where the annotations are (None: not looked at), or why the message is refused."""
        if self.strip_in is None:
            return None
        try:
            return qd_annotations.inbound(data, strip=self.strip_in)
        except (AnnotationError, MalformedMessageError) as exc:
            return exc

    def _route_new(self, held: Held) -> None:
        if self.held or not self.route(held):
            self.held.append(held)
        self.refresh()

    # --- large messages, routed on their first bytes (enmesh.router.streaming) ---------

    def _start_stream(self, delivery: Delivery) -> None:
        """Route a message on its first Q2_UPPER bytes; the rest follows as it comes."""
        assert self.partial is not None
        data = bytes(self.partial)
        problem: Exception | None = None
        try:
            if not head_complete(data):
                if len(data) < streaming.HEAD_LIMIT:
                    return  # routing needs the properties: keep buffering, bounded
                problem = MalformedMessageError(
                    f"the sections before the body exceed {streaming.HEAD_LIMIT} bytes"
                )
        except MalformedMessageError as exc:
            problem = exc
        self.partial = None
        self.arriving = delivery
        presettled = self._count(delivery)
        found = self._annotations(data) if problem is None else problem
        if isinstance(found, Exception):
            self.refusal = found  # read to its end, then refused
            return
        self.stream = Stream(functools.partial(streaming.park, self))
        self.streamed = Held(
            data,
            self,
            None if presettled else delivery,
            ann=found,
            stream=self.stream,
            cursor=self.stream.origin,
        )
        self._route_new(self.streamed)

    def _more(self, delivery: Delivery, chunk: bytes) -> bool:
        """More of a streaming (or refused) message; at its end (True), settle what is due."""
        if self.stream is not None:
            self.stream.append(chunk)
        if delivery.partial or delivery.pending:
            return False  # more to come, or more than Q2 let us read yet
        self.link.advance()
        stream, held, refusal, deferred = self.stream, self.streamed, self.refusal, self.deferred
        self._end_stream()
        if stream is not None:
            stream.finish()
        if delivery.settled:  # presettled (perhaps only on its last frame): forget it
            if held is not None:
                held.delivery = None
            delivery.settle()
        elif refusal is not None:
            _refuse_message(delivery, False, refusal)
        elif deferred is not None and held is not None:
            held.settle_origin(*deferred)  # settled by its consumer before it all arrived
        self.refresh()
        return True

    def _end_stream(self) -> None:
        self.arriving = self.stream = self.streamed = self.refusal = self.deferred = None

    def _aborted(self, delivery: Delivery) -> None:
        """The sender aborted a delivery: so do its copies, and no outcome is owed."""
        self.partial = None
        if self.stream is not None:
            self.stream.abort()
        held = self.streamed
        if held is not None:
            held.delivery = None
            if held in self.held:
                self.held.remove(held)
        self._end_stream()
        self.link.advance()  # drops the bytes proton still held for it (Q2)
        delivery.settle()
        self.refresh()  # the aborted transfer used credit

    def defer(self, held: Held, state: int, source: Outcome | None) -> bool:
        """Keep an outcome for a delivery still arriving (proton settles only whole ones)."""
        if held.delivery is None or held.delivery != self.arriving:
            return False
        self.deferred = (state, source)
        return True

    def unpark(self) -> None:
        """Q2 released: read what proton has buffered since."""
        if not self.closed and self.link.current is not None:
            self.on_delivery()

    def retry(self) -> None:
        """Route held messages in order, as far as destinations take them."""
        moved = False
        while self.held:
            if not self.route(self.held[0]):
                break
            self.held.popleft()
            moved = True
        if moved:
            self.refresh()

    def set_routable(self, routable: bool) -> None:
        self.routable = routable
        self.refresh()

    def refresh(self) -> None:
        """Grant credit up to capacity while routable; take it all back when not.

        A source with `demand` gets no more than its destinations asked for, less what it
        already holds: a broker keeps what no consumer wants (enmesh.router.demand).
        """
        if self.closed or (self.demand is not None and self.link.drain_mode):
            return  # a broker link draining: its answer, not us, settles its credit (drain.py)
        want = 0
        wanted = None if self.demand is None else 0  # what the destinations asked for
        if self.routable:
            wanted = None if self.demand is None else self.demand()
            limit = self.capacity if wanted is None else min(self.capacity, wanted)
            arriving = self.partial is not None or self.arriving is not None
            want = limit - len(self.held) - arriving
            if self.room is not None:
                want = min(want, self.room())
        if wanted == 0 and self.held and self.unwanted is not None:
            self.unwanted()
        # Anycast keeps credit it already gave; multicast room, demand and unroutability
        # take it back.
        reduce = not self.routable or self.room is not None or self.demand is not None
        self.grant(want, may_reduce=reduce)

    def grant(self, want: int, *, may_reduce: bool) -> None:
        """Set the sender's credit to `want` (raising it; lowering it only if `may_reduce`).

        On the wire, link-credit is `credit - queued` as an unsigned number: never ask for
        less than what is already queued (a partial delivery), or it wraps to 2**32.
        """
        link = self.link._impl
        target = max(want, 0) + rawproton.link_queued(link)
        credit = rawproton.link_credit(link)
        if target > credit or (may_reduce and target < credit):
            rawproton.link_flow(link, target - credit)

    def release_held(self) -> None:
        """Give back what we hold so the sender can re-route it (unsettled: released)."""
        while self.held:
            held = self.held.popleft()
            held.settle_origin(RELEASED)
        self.refresh()

    def lost(self) -> None:
        """The producer side is gone.

        Unsettled messages held here can no longer be settled: they are dropped, and their
        producer resends them. Presettled ones were handed over for good: they stay queued
        (the link is closed, so no more arrive) until destinations take them.
        """
        self.closed = True
        if self.stream is not None:
            self.stream.abort()  # cut off mid-message: its copies are aborted too
        self._end_stream()
        self.held = deque(held for held in self.held if held.presettled)
        self.partial = None

    @property
    def drained(self) -> bool:
        """Closed, with nothing left to deliver: it can be forgotten."""
        return self.closed and not self.held


def _refuse_message(delivery: Delivery, presettled: bool, problem: Exception) -> None:
    """Reject a message qdrouterd would refuse for its annotations (dropped if presettled)."""
    if presettled:
        return
    known = isinstance(problem, AnnotationError)
    condition = "amqp:invalid-field" if known else "amqp:decode-error"
    delivery.local.condition = Condition(condition, str(problem))
    delivery.update(Disposition.REJECTED)
    delivery.settle()
