"""Credit for stored messages: a broker gives out only what consumers ask for.

Messages of a waypoint's phase 1 (or later) come out of a broker through an `in` autoLink.
Every message the router takes without a consumer wanting it stays unsettled in the router,
and when the router restarts, or gives it back, RabbitMQ's quorum queues count a delivery
attempt: enough of those and a message no consumer ever saw is dead-lettered. So the
sources of these keys (the broker links, and the transit links carrying their messages to
other routers) get credit that follows the consumers' credit, not the link capacity:

- a broker link: the free credit of the local consumers, plus that of the transit links
  toward routers with consumers (what `Routing.route_to` could pick);
- a transit link delivering here: the local consumers' free credit, but nothing while this
  router has a live broker link for each `in` autoLink of the key (autoLinks are the same
  on every router): its own links then reach every queue another router could pull from,
  and a second router pulling for the same consumer would only double what leaves the
  broker. A router missing one (no broker connection, or it is down) is fed by the others,
  each for the whole of its consumers' credit, as it cannot know which of them reaches a
  queue that holds anything: at most credit x feeding routers leave the broker;
- a transit link passing through: the free credit of the next hop's transit link, which in
  turn follows the destination's consumers, hop by hop.

Credit given is not always used as asked: a router that granted a transit link credit may
take it back (its own broker link came up, so it stops taking from others), or a consumer
may leave, after the broker already sent what the credit asked for. What a source then
holds that its destinations want none of (no local consumer, and no demand) would stay
unacknowledged in the broker for good, out of every other consumer's reach: it is given
back (released) once nobody has wanted it for `GIVE_BACK_AFTER_SECONDS`. The wait keeps
a moment of zero credit from counting as a delivery attempt (RabbitMQ 3.10's quorum
queues count a release).

qdrouterd 1.19 does not do this: it grants an in-autoLink its full `linkCapacity` once the
address is reachable and replenishes a credit per settled delivery, keeping what consumers
have no credit for on their links' undelivered lists.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from enmesh.router.forwarding import AddressState, OutLink
    from enmesh.router.inlinks import InLink
    from enmesh.router.router import Router

PHASE_MARK = "@"
GIVE_BACK_AFTER_SECONDS = 10.0


def split_phase(key: str) -> tuple[str, int | None]:
    """A routing key's address and waypoint phase (`<address>@<phase>`; None: no phase)."""
    address, mark, phase = key.rpartition(PHASE_MARK)
    return (address, int(phase)) if mark and phase.isdigit() else (key, None)


def is_stored(router: Router, key: str) -> bool:
    """Is `key` a waypoint phase after the broker (`<address>@<phase>`, phase > 0)?"""
    address, phase = split_phase(key)
    return phase is not None and phase > 0 and router.routing.semantics(address).waypoint


def demand_of(router: Router, inbound: InLink) -> Callable[[], int]:
    """`inbound`'s demand, as InLink.refresh asks for it (on every message it receives)."""
    configured = sum(  # the config is fixed: counted once, not per message
        1
        for auto in router.config.auto_links
        if auto.direction == "in"
        and router.routing.semantics(auto.address).key(auto.address, auto.phase) == inbound.key
    )
    return functools.partial(demand, router, inbound, configured)


def demand(router: Router, inbound: InLink, in_autolinks: int) -> int:
    """How many messages the destinations of a stored-message source can take right now.

    `in_autolinks`: how many `in` autoLinks the config has for the source's key.
    """
    key, destination = inbound.key, inbound.destination_router
    if destination is not None and destination != router.id:
        return _free(router.routing.transit_link(key, destination))
    state = router.addresses.get(key)
    consumers = state.consumers if state is not None else []
    local = sum(_free(out) for out in consumers)
    if destination is not None:  # a transit link delivering here
        return 0 if state is not None and _reaches_every_queue(state, in_autolinks) else local
    if state is not None and state.distribution == "closest" and consumers:
        return local
    remote = router.mesh.routers_with(key)
    return local + sum(_free(router.routing.transit_link(key, other)) for _, other in remote)


def broker_sources(state: AddressState) -> list[InLink]:
    """This router's live links from brokers (`in` autoLinks) for a stored key."""
    return [
        source
        for source in state.producers
        if source.destination_router is None and source.demand is not None and not source.closed
    ]


def _reaches_every_queue(state: AddressState, configured: int) -> bool:
    """Has this router a live broker link for each `in` autoLink configured for the key?"""
    return 0 < configured <= len(broker_sources(state))


def _free(out: OutLink | None) -> int:
    return 0 if out is None or out.closed else max(out.free, 0)


def give_back_later(router: Router, inbound: InLink) -> None:
    """`inbound` holds messages nobody asks for now: give them back if that lasts."""
    if not inbound.give_back_due:
        inbound.give_back_due = True
        router.loop.call_later(
            GIVE_BACK_AFTER_SECONDS, functools.partial(_give_back_if_unwanted, router, inbound)
        )


def _give_back_if_unwanted(router: Router, inbound: InLink) -> None:
    inbound.give_back_due = False
    if inbound.closed or not inbound.held:
        return
    inbound.retry()
    state = router.addresses.get(inbound.key)
    if state is not None and state.consumers:
        return  # a consumer here asks again once it has credit
    if inbound.held and not (inbound.routable and inbound.demand and inbound.demand() > 0):
        inbound.release_held()
