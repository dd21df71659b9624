"""Routing: the address table and where each message goes.

The address table (`Router.addresses`) holds, per routing key, the local sources
(InLinks) and destinations (OutLinks) and the key's delivery counters. Forwarding picks a
destination per message by the key's distribution (balanced, closest, multicast), among
local consumers and transit links toward the routers that advertise the key; a transit
link is attached on first use, one per (key, destination router), and retired (closed
once idle) when its path or its destination's interest goes.
"""

from __future__ import annotations

import functools
import itertools
from typing import TYPE_CHECKING

from proton import Link

from enmesh.router import demand, tally
from enmesh.router.addressing import AddressSemantics, best_match
from enmesh.router.annotations import node_id
from enmesh.router.forwarding import RELEASED, AddressState, Held, OutLink, choose_balanced
from enmesh.router.inlinks import InLink
from enmesh.router.outcomes import Fanout

_TRANSIT_SERIAL = itertools.count(1)

if TYPE_CHECKING:
    from enmesh.router.router import Router

DYNAMIC_PREFIX = "_dynamic."
WAYPOINT_PHASE_MARK = "@"  # routing keys of waypoint phases: `<address>@<phase>`
TRANSIT_PREFIX = "_mesh/"
# Addresses seen keep their counters when their last link goes (stable /metrics series),
# up to this many; beyond it, an idle address that is not configured is forgotten.
MAX_KNOWN_ADDRESSES = 10_000


class Routing:
    """The address table of one router, and the forwarding decisions made from it."""

    def __init__(self, router: Router) -> None:
        self.router = router

    def semantics(self, internal: str) -> AddressSemantics:
        entry = best_match(self.router.config.addresses, internal)
        if entry is None:  # the router's defaultDistribution
            return AddressSemantics(self.router.config.router.default_distribution, False)
        return AddressSemantics(entry.distribution, entry.waypoint)

    def _state(self, key: str, semantics: AddressSemantics) -> AddressState:
        state = self.router.addresses.get(key)
        if state is None:
            state = self.router.addresses[key] = AddressState(key, semantics.distribution)
        return state

    def add_destination(self, out: OutLink) -> None:
        state = self.router.addresses.get(out.key) or self._state(
            out.key, self.semantics_of_key(out.key)
        )
        tally.bind(out, state.counts, outgoing=True)
        state.consumers.append(out)
        self._key_changed(out.key)

    def semantics_of_key(self, key: str) -> AddressSemantics:
        return self.semantics(key.rsplit("@", 1)[0] if "@" in key else key)

    def add_source(self, inbound: InLink) -> None:
        state = self._state(inbound.key, self.semantics_of_key(inbound.key))
        tally.bind(inbound, state.counts, outgoing=False)
        state.producers.append(inbound)
        if state.distribution == "multicast":
            inbound.room = functools.partial(self._multicast_room, inbound)
        if demand.is_stored(self.router, inbound.key):
            inbound.demand = demand.demand_of(self.router, inbound)
            inbound.unwanted = functools.partial(demand.give_back_later, self.router, inbound)
            self.retry_key(inbound.key)  # a broker link here changes what transit may take
            return
        inbound.set_routable(self.routable(inbound))

    def forget_link(self, link: Link) -> None:
        out: OutLink | None = getattr(link, "enmesh_out", None)
        if out is not None and not out.closed:
            self._requeue(out.lost())
            state = self.router.addresses.get(out.key)
            if state is not None and out in state.consumers:
                state.consumers.remove(out)
                self._key_changed(out.key)
            for transit_key, transit in list(self.router.transit.items()):
                if transit is out:
                    del self.router.transit[transit_key]
        inbound: InLink | None = getattr(link, "enmesh_in", None)
        if inbound is not None and not inbound.closed:
            inbound.lost()
            inbound.retry()
            self._forget_if_drained(inbound)
            if inbound.demand is not None:
                self.retry_key(inbound.key)  # without this broker link, transit may feed
        for counted in (out, inbound):
            if counted is not None:
                self.router.retired.link_gone(counted)
                self._forget_if_transient(counted.key)

    def _forget_if_transient(self, key: str) -> None:
        """An idle address keeps its counters (stable series), unless it is a dynamic reply
        address (one per requester: they would pile up) or the router knows too many."""
        state = self.router.addresses.get(key)
        if state is None or not state.idle:
            return
        if _dynamic(key) or (
            len(self.router.addresses) > MAX_KNOWN_ADDRESSES
            and best_match(self.router.config.addresses, key.rsplit(WAYPOINT_PHASE_MARK, 1)[0])
            is None
        ):
            self.forget_address(key)

    def address_counts(self, key: str) -> list[int]:
        """The delivery counters of `key` (enmesh.router.tally), the address now known;
        a dynamic address without local links is not kept for it."""
        state = self.router.addresses.get(key)
        if state is None and _dynamic(key):
            return tally.zeros()
        return self._state(key, self.semantics_of_key(key)).counts

    def forget_address(self, key: str) -> bool:
        """Forget an idle address and its counters (management, or a transient address);
        False if links still use it."""
        state = self.router.addresses.get(key)
        if state is None or not state.idle:
            return False
        self.router.retired.address_gone(state.counts)
        del self.router.addresses[key]
        return True

    def _requeue(self, unsent: list[Held]) -> None:
        """Messages that never left a lost link go back to their origin to be re-routed."""
        origins = []
        for held in reversed(unsent):
            if held.origin is not None and not held.origin.closed:
                held.origin.held.appendleft(held)
                origins.append(held.origin)
            else:
                held.settle_origin(RELEASED)
        for origin in origins:
            self.router.loop.call_soon(origin.retry)

    # --- forwarding decisions ---------------------------------------------------------

    def routable(self, inbound: InLink) -> bool:
        return self.reachable(inbound.key, inbound.destination_router)

    def reachable(self, key: str, destination: str | None = None) -> bool:
        """Has `key` a consumer here or elsewhere (or at `destination`, if given)?"""
        if destination is not None and destination != self.router.id:
            ra = self.router.mesh.advertisements.get(destination)
            return (
                destination in self.router.mesh.routes.next_hop
                and ra is not None
                and key in ra.addresses
            )
        state = self.router.addresses.get(key)
        local = bool(state and state.consumers)
        if destination == self.router.id:
            return local
        return local or bool(self.router.mesh.routers_with(key))

    def route(self, held: Held) -> bool:
        """Forward one message, or return False to keep holding it."""
        inbound = held.origin
        if inbound is None:
            return True
        return self.route_to(held, inbound.key, inbound.destination_router)

    def route_to(self, held: Held, key: str, destination: str | None) -> bool:
        """Forward `held` for `key` (toward `destination` if given), or return False."""
        if destination is not None and destination != self.router.id:
            transit = self.transit_link(key, destination)
            if transit is None or transit.free <= 0:
                return False
            transit.offer(held)
            return True
        state = self.router.addresses.get(key)
        local = state.consumers if state is not None else []
        remote_routers = [] if destination == self.router.id else self.router.mesh.routers_with(key)
        distribution = state.distribution if state is not None else "balanced"
        if distribution == "multicast":
            return self._multicast(held, key, local, [r for _, r in remote_routers])
        if distribution == "closest" and local:
            chosen = choose_balanced(local)
        elif distribution == "closest":
            chosen = next(
                (
                    link
                    for _, router in remote_routers
                    if (link := self.transit_link(key, router)) is not None and link.free > 0
                ),
                None,
            )
        elif remote_routers:
            remote = [self.transit_link(key, r) for _, r in remote_routers]
            chosen = choose_balanced(local + [link for link in remote if link is not None])
        else:
            chosen = choose_balanced(local)
        if chosen is None:
            return False
        chosen.offer(held)
        return True

    def _multicast(self, held: Held, key: str, local: list[OutLink], remote: list[str]) -> bool:
        targets = list(local)
        for router in remote:
            link = self.transit_link(key, router)
            if link is not None:
                targets.append(link)
        if not targets:
            return False
        # Unsettled: every copy unsettled, the producer settled once all are (outcomes.py).
        fanout = None if held.presettled else Fanout(held.settle_with)
        for out in targets:
            if len(out.waiting) >= 2 * out.capacity:  # safety net; credit keeps us below
                out.dropped += 1
                continue
            out.offer(held.copy(fanout))
        held.release_stream()  # the copies have their own places in it
        if fanout is not None:
            fanout.close()
        return True

    def _multicast_room(self, inbound: InLink) -> int:
        """Copies the slowest destination of a multicast source can still queue.

        Transit links are attached here, before any message, so that a producer whose
        only consumers are on other routers gets credit at all.
        """
        key, destination = inbound.key, inbound.destination_router
        if destination is not None and destination != self.router.id:
            outs = [self.transit_link(key, destination)]
        else:
            state = self.router.addresses.get(key)
            outs = list(state.consumers) if state is not None else []
            if destination is None:
                outs += [self.transit_link(key, r) for _, r in self.router.mesh.routers_with(key)]
        return min((out.capacity - len(out.waiting) for out in outs if out is not None), default=0)

    def transit_link(self, key: str, destination: str) -> OutLink | None:
        """The link carrying `key` toward `destination`, attached on first use."""
        existing = self.router.transit.get((key, destination))
        if existing is not None and not existing.closed:
            return existing
        hop = self.router.mesh.routes.next_hop.get(destination)
        conn = self.router.neighbours.get(hop) if hop else None
        if conn is None or conn.closed:
            return None
        # A name of its own per attach: the previous link for the same key may still be
        # detaching at the next router (a stream it was reading), and AMQP forbids a second
        # attach of a name still attached there.
        name = f"transit/{destination}/{key}/{next(_TRANSIT_SERIAL)}"
        sender = self.router.session_of(conn).sender(name)
        sender.target.address = f"{TRANSIT_PREFIX}{destination}/{key}"
        sender.open()
        out = OutLink(sender, key, conn.context["info"].link_capacity)
        out.hop = hop
        out.trace_as = node_id(self.router.id)  # routers always annotate for each other
        tally.bind(out, self.address_counts(key), outgoing=True)
        self.router.transit[(key, destination)] = out
        return out

    def retry_key(self, key: str) -> None:
        state = self.router.addresses.get(key)
        if state is not None:
            for inbound in list(state.producers):
                self._update_source(inbound)
        self._retry_senders()

    def retry_held(self, key: str) -> None:
        state = self.router.addresses.get(key)
        if state is not None:
            for inbound in list(state.producers):
                if inbound.held:
                    inbound.retry()
                    self._forget_if_drained(inbound)
        self._retry_senders()

    def _retry_senders(self) -> None:
        """What waits for any address, not one key: anonymous senders' messages, wills."""
        self.router.relay.retry()
        self.router.wills.retry()

    def _forget_if_drained(self, inbound: InLink) -> None:
        """A producer link that is gone stays a source until its presettled messages left."""
        state = self.router.addresses.get(inbound.key)
        if inbound.drained and state is not None and inbound in state.producers:
            state.producers.remove(inbound)

    def _key_changed(self, key: str) -> None:
        self.retry_key(key)
        self.router.mesh_links.advertise_soon()

    def refresh_all(self) -> None:
        for (key, destination), out in list(self.router.transit.items()):
            hop = self.router.mesh.routes.next_hop.get(destination)
            ra = self.router.mesh.advertisements.get(destination)
            old_hop = self.router.neighbours.get(out.hop or "")
            if hop != out.hop and (old_hop is None or old_hop.closed):
                # The path is gone: what was in flight on it can no longer settle.
                del self.router.transit[(key, destination)]
                self._requeue(out.lost())
                out.link.close()
            elif hop != out.hop:
                # A better path appeared; the old one still delivers what it carries.
                del self.router.transit[(key, destination)]
                self._retire(out)
            elif ra is None or key not in ra.addresses:
                # The destination no longer wants `key`, but outcomes of what it already
                # has are still on their way back: stop using the link, close it once idle.
                del self.router.transit[(key, destination)]
                self._retire(out)
        for state in list(self.router.addresses.values()):
            for inbound in list(state.producers):
                self._update_source(inbound)
        self._retry_senders()

    def _update_source(self, inbound: InLink) -> None:
        """Re-evaluate one source after a change: credit, and what it holds."""
        inbound.retry()
        self._forget_if_drained(inbound)
        routable = self.routable(inbound)
        inbound.set_routable(routable)
        if not routable and inbound.destination_router is not None and inbound.held:
            self._release_if_still_unroutable_later(inbound)

    def _release_if_still_unroutable_later(self, inbound: InLink) -> None:
        """Held for a destination that is gone: the upstream router can re-route them, if
        the path stays gone for helloMaxAgeSeconds. A router that paused reads, on waking,
        its neighbours' advertisements from while it was silent (they had lost it): the
        path flaps back within a hello or two, and the messages it held go on their way."""
        if inbound.release_due:
            return
        inbound.release_due = True

        def release_if_still_unroutable() -> None:
            inbound.release_due = False
            if not inbound.closed and inbound.held and not self.routable(inbound):
                inbound.release_held()

        grace = float(self.router.config.router.hello_max_age_seconds)
        self.router.loop.call_later(grace, release_if_still_unroutable)

    def _retire(self, out: OutLink) -> None:
        unsent = list(out.waiting)
        out.waiting.clear()
        self._requeue(unsent)
        out.retiring = True
        self.close_if_idle(out)

    @staticmethod
    def close_if_idle(out: OutLink) -> None:
        if out.retiring and not out.unsettled and not out.closed:
            out.closed = True
            out.link.close()


def _dynamic(key: str) -> bool:
    """A dynamic (reply) address's routing key, with or without a tenant prefix."""
    return key.rsplit("/", 1)[-1].startswith(DYNAMIC_PREFIX)
