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
import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from proton import Condition, Delivery, Disposition, Receiver, Sender, Terminus

from enmesh.router import annotations as qd_annotations
from enmesh.router import tally
from enmesh.router.annotations import AnnotationError, Annotations
from enmesh.router.sections import MalformedMessageError

RELEASED = Disposition.RELEASED
ACCEPTED = Disposition.ACCEPTED


@dataclass(eq=False)
class Held:
    """A message the router holds: its bytes and, if unsettled, where its outcome goes."""

    data: bytes
    origin: InLink | None  # None for copies made by multicast
    delivery: Delivery | None  # the inbound delivery to settle; None if presettled
    key: str | None = None  # anonymous relay: the routing key its `to` resolved to
    ann: Annotations | None = None  # where its annotations are; None: not looked at

    @property
    def presettled(self) -> bool:
        return self.delivery is None

    def settle_origin(self, state: int, source: Delivery | None = None) -> None:
        """Give the producer side the outcome (copied from `source` when there is one)."""
        inbound = self.delivery
        if inbound is None:
            return
        self.delivery = None
        if self.origin is not None and self.origin.closed:
            return  # the producer's link is gone; its engine already forgot the delivery
        if source is not None and not (
            self.origin is not None
            and self.origin.modified_as_released
            and source.remote_state == Disposition.MODIFIED
        ):
            _copy_outcome(source, inbound)
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


def _copy_outcome(source: Delivery, target: Delivery) -> None:
    """Copy a remote disposition (state and its fields) onto a local one, unchanged."""
    state = source.remote_state
    remote, local = source.remote, target.local
    if state == Disposition.REJECTED:
        if remote.condition is not None:
            local.condition = remote.condition
    elif state == Disposition.MODIFIED:
        local.failed = True  # qdrouterd 1.19 sets delivery-failed on every modified it passes
        local.undeliverable = remote.undeliverable
        if remote.annotations is not None:
            local.annotations = cast(dict[str, Any], remote.annotations)
    elif state == Disposition.RECEIVED:
        local.section_number = remote.section_number
        local.section_offset = remote.section_offset
    if state:
        target.update(state)


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
        while self.waiting and link.credit > 0 and not self.closed:
            held = self.waiting.popleft()
            if held.delivery is not None and held.origin is not None and held.origin.closed:
                continue  # its producer or broker is gone and will redeliver it: no duplicate
            tag = str(next(self._tags))
            delivery = link.delivery(tag)
            link.send(qd_annotations.outgoing(held.data, held.ann, self.trace_as))
            link.advance()
            self.delivered += 1
            sent += 1
            if self.presettle or held.presettled:
                self.presettled += 1
                delivery.settle()
                if held.delivery is not None:  # an unsettled message sent as a copy
                    held.settle_origin(ACCEPTED)
            else:
                self.unsettled[tag] = (delivery, held)
        if sent:
            self.tally[self.slot] += sent
        return sent

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
            held.settle_origin(state, delivery)
            delivery.settle()
            del self.unsettled[delivery.tag]

    def _count(self, state: int) -> None:
        count_outcome(self, state)

    def lost(self) -> list[Held]:
        """The link is gone: what was in flight may or may not have been processed, so its
        producer gets `modified` with delivery-failed (qdrouterd 1.19's
        qdr_link_cleanup_deliveries_CT); return what never left, to be re-routed."""
        self.closed = True
        for delivery, held in self.unsettled.values():
            held.settle_origin(Disposition.MODIFIED)
            with contextlib.suppress(Exception):  # the engine may already have freed it
                delivery.settle()
        self.unsettled.clear()
        unsent = [h for h in self.waiting if not h.presettled or h.origin is not None]
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
            self.partial = None
            delivery.settle()
            self.link.advance()
            self.refresh()  # the aborted transfer used credit
            return
        if not delivery.readable:
            return
        chunk = self.link.recv(delivery.pending) or b""
        if delivery.partial:
            if self.partial is None:
                self.partial = bytearray()
            self.partial += chunk  # in place: a long message must not copy itself per frame
            return
        buffered, self.partial = self.partial, None
        data = bytes(buffered + chunk) if buffered is not None else bytes(chunk)
        self.link.advance()
        self.received += 1
        self.tally[self.slot] += 1
        presettled = delivery.settled
        if presettled:
            self.presettled += 1
            # The sender has forgotten it, so must we: without a local settle proton
            # keeps every presettled delivery for the link's lifetime (~1.3 KB each).
            delivery.settle()
        found = None
        if self.strip_in is not None:
            try:
                found = qd_annotations.inbound(data, strip=self.strip_in)
            except (AnnotationError, MalformedMessageError) as exc:
                _refuse_message(delivery, presettled, exc)
                self.refresh()
                return
        held = Held(data, self, None if presettled else delivery, ann=found)
        if self.held or not self.route(held):
            self.held.append(held)
        self.refresh()

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
            want = limit - len(self.held) - (self.partial is not None)
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
