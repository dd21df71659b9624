"""Deliveries through one router: encoded bytes in, destinations chosen, settlement back.

An InLink receives; it grants credit only while its address has a reachable
destination, never more than `capacity` minus what it already holds (for stored messages
from a broker, never more than the destinations asked for), and takes credit back (a
negative flow) when the last destination goes. An OutLink sends when its peer
gives credit and remembers every unsettled delivery's origin, so the consumer's
outcome (accepted, rejected, released, modified) reaches the producer unchanged, and a
lost link releases what was in flight instead of dropping it.

Message bytes are never decoded or re-encoded here.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from proton import Condition, Delivery, Disposition, Receiver, Sender, Terminus

from enmesh.router import annotations as qd_annotations
from enmesh.router import streaming, tally
from enmesh.router.annotations import AnnotationError, Annotations
from enmesh.router.outcomes import FAILED, Fanout, Outcome
from enmesh.router.sections import MalformedMessageError, head_complete
from enmesh.router.streaming import Cursor, Stream

RELEASED = Disposition.RELEASED
ACCEPTED = Disposition.ACCEPTED


@dataclass(eq=False)
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
            count_outcome(self.origin, inbound.local_state)
        inbound.settle()


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
        # Keyed by tag as proton returns it (a str), not as given.
        self.unsettled: dict[str, tuple[Delivery, Held]] = {}
        self.delivered = 0
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
        self.current: tuple[str, Delivery, Held] | None = None
        self.q3_blocked = False
        link.enmesh_out = self

    @property
    def outstanding(self) -> int:
        return len(self.waiting) + len(self.unsettled)

    @property
    def free(self) -> int:
        """How many more messages this link can take now without queueing beyond credit."""
        return self.link.credit - len(self.waiting)

    def offer(self, held: Held) -> None:
        """Queue a message and send what credit allows."""
        self.waiting.append(held)
        self.pump()

    def pump(self) -> int:
        sent = 0
        link = self.link
        while not self.closed:
            if self.current is not None and not self._feed():
                break  # a large message is still on its way through this link
            if not (self.waiting and link.credit > 0):
                break
            held = self.waiting.popleft()
            if held.delivery is not None and held.origin is not None and held.origin.closed:
                held.release_stream()
                continue  # its producer or broker is gone and will redeliver it: no duplicate
            if held.stream is not None and held.stream.aborted:
                held.release_stream()
                continue  # its producer aborted it before it started here
            tag = str(next(self._tags))
            delivery = link.delivery(tag)
            link.send(qd_annotations.outgoing(held.data, held.ann, self.trace_as))
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
        return sent

    def _sent(self, delivery: Delivery, held: Held) -> None:
        """The whole message is with proton: end the delivery (settle it if presettled)."""
        self.link.advance()
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

    def on_disposition(self, delivery: Delivery) -> None:
        entry = self.unsettled.get(delivery.tag)
        if entry is None:
            return
        _, held = entry
        state = delivery.remote_state
        if delivery.settled or state in (
            ACCEPTED,
            Disposition.REJECTED,
            RELEASED,
            Disposition.MODIFIED,
        ):
            self._count(state)
            held.settle_origin(state, Outcome.of(delivery))
            del self.unsettled[delivery.tag]
            if self.current is not None and self.current[0] == delivery.tag:
                # Settled before it was all sent: the rest is not wanted.
                self.current = None
                held.release_stream()
                delivery.abort()
                self.pump()
            else:
                delivery.settle()

    def _count(self, state: int) -> None:
        count_outcome(self, state)

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
        # What the router settled with the sender, and how; where the address counts it.
        self.accepted = self.rejected = self.released = self.modified = 0
        self.presettled = 0
        self.tally, self.slot = tally.NOWHERE, 0
        self.closed = False
        self.routable = False
        # Multicast: how many more copies the slowest destination can queue right now.
        self.room: Callable[[], int] | None = None
        # Stored messages (from a broker): how many the destinations asked for right now.
        self.demand: Callable[[], int] | None = None
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

    def on_delivery(self, delivery: Delivery) -> None:
        if self.closed:  # sent before the peer saw that we let the link go: give it back
            self.link.recv(delivery.pending)
            if delivery.partial:
                return
            self.link.advance()
            if not delivery.settled:
                delivery.update(RELEASED)
            delivery.settle()
            return
        if delivery.aborted:
            self._aborted(delivery)
            return
        if not delivery.readable:
            return
        if self.stream is not None and self.stream.held_off:
            return  # Q2: proton keeps the bytes, and its session window closes behind them
        chunk = self.link.recv(delivery.pending) or b""
        if self.arriving is not None:
            self._more(delivery, chunk)
            return
        if delivery.partial:
            if self.partial is None:
                self.partial = bytearray()
            self.partial += chunk  # in place: a long message must not copy itself per frame
            if len(self.partial) >= streaming.Q2_UPPER:
                self._start_stream(delivery)
            return
        buffered, self.partial = self.partial, None
        data = bytes(buffered + chunk) if buffered is not None else bytes(chunk)
        self.link.advance()
        presettled = self._count(delivery)
        if presettled:
            # The sender has forgotten it, so must we: without a local settle proton
            # keeps every presettled delivery for the link's lifetime (~1.3 KB each).
            delivery.settle()
        found = self._annotations(data)
        if isinstance(found, Exception):
            _refuse_message(delivery, presettled, found)
            self.refresh()
            return
        self._route_new(Held(data, self, None if presettled else delivery, ann=found))

    def _count(self, delivery: Delivery) -> bool:
        """Count a new delivery; is it presettled?"""
        self.received += 1
        self.tally[self.slot] += 1
        if delivery.settled:
            self.presettled += 1
        return delivery.settled

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

    def _more(self, delivery: Delivery, chunk: bytes) -> None:
        """More of a streaming (or refused) message; at its end, settle what is due."""
        if self.stream is not None:
            self.stream.append(chunk)
        if delivery.partial:
            return
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
        """Q2 released: read what proton has buffered for the current delivery."""
        current = self.link.current
        if not self.closed and current is not None:
            self.on_delivery(current)

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
        if self.closed:
            return
        want = 0
        if self.routable:
            limit = self.capacity if self.demand is None else min(self.capacity, self.demand())
            arriving = self.partial is not None or self.arriving is not None
            want = limit - len(self.held) - arriving
            if self.room is not None:
                want = min(want, self.room())
        # Anycast keeps credit it already gave; multicast room, demand and unroutability
        # take it back.
        reduce = not self.routable or self.room is not None or self.demand is not None
        self.grant(want, may_reduce=reduce)

    def grant(self, want: int, *, may_reduce: bool) -> None:
        """Set the sender's credit to `want` (raising it; lowering it only if `may_reduce`).

        On the wire, link-credit is `credit - queued` as an unsigned number: never ask for
        less than what is already queued (a partial delivery), or it wraps to 2**32.
        """
        link = self.link
        target = max(want, 0) + link.queued
        if target > link.credit or (may_reduce and target < link.credit):
            link.flow(target - link.credit)

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


def _failed(inbound: Delivery, origin: InLink | None) -> None:
    """Modified, delivery-failed: in doubt (a broker that ends sessions on it: released)."""
    if origin is not None and origin.modified_as_released:
        inbound.update(RELEASED)
        return
    inbound.local.failed = True
    inbound.update(Disposition.MODIFIED)


def _refuse_message(delivery: Delivery, presettled: bool, problem: Exception) -> None:
    """Reject a message qdrouterd would refuse for its annotations (dropped if presettled)."""
    if presettled:
        return
    known = isinstance(problem, AnnotationError)
    condition = "amqp:invalid-field" if known else "amqp:decode-error"
    delivery.local.condition = Condition(condition, str(problem))
    delivery.update(Disposition.REJECTED)
    delivery.settle()


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
