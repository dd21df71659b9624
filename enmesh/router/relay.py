"""Anonymous relay: a client sender link with no target; each message's `to` names its address.

The router offers `ANONYMOUS-RELAY` in its open frame, as qdrouterd does. What follows is
qdrouterd 1.19's behaviour (router_node.c AMQP_rx_handler, router_core/transfer.c
qdr_link_forward_CT):
- an anonymous link gets credit from the start, since its messages may go anywhere;
- the address is the `x-opt-qd.to` message annotation when the listener does not strip
  incoming annotations (`stripAnnotations: no | out`), else the properties' `to`, in the
  connection's vhost on a multi-tenant listener (unlike qdrouterd, the annotation too:
  addresses never cross vhosts);
- no address: rejected, amqp:precondition-failed; an address the user's policy group may
  not send to: rejected, amqp:unauthorized-access; an address whose distribution is
  `unavailable`: rejected, amqp:not-found. The link stays open in every case;
- no consumer reachable for the address: released (dropped if presettled);
- otherwise routed as a named sender's message: outcomes travel back end to end, and a
  lost consumer link releases what it had in flight. A message whose consumer has no
  credit yet is held (in order) and counts against the link's credit.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, cast

from proton import Condition, Disposition, Link, Receiver

from enmesh.router import tally
from enmesh.router.annotations import strips_in
from enmesh.router.forwarding import RELEASED, Held, set_address
from enmesh.router.inlinks import InLink
from enmesh.router.outcomes import Outcome
from enmesh.router.sections import MalformedMessageError, message_address

if TYPE_CHECKING:
    from enmesh.router.connecting import ConnectionInfo
    from enmesh.router.engine import ProtonSocket
    from enmesh.router.router import Router

log = logging.getLogger("enmesh.router.relay")
CAPABILITY = "ANONYMOUS-RELAY"
UNAUTHORIZED = "amqp:unauthorized-access"
UNAVAILABLE = "unavailable"
RESERVED_MARK = "@"  # the router's waypoint phases: never a client's address
WILL_ADDRESS = "$lwt"  # where clients register wills (enmesh.router.wills)


class AnonymousInLink(InLink):
    """A client's anonymous sender: always routable, the key decided per message."""

    def __init__(self, link: Receiver, capacity: int, relay: Relay, info: ConnectionInfo):
        super().__init__(link, "", capacity, self._route)
        self.relay, self.info = relay, info
        self.honour_annotation = relay.honours_annotation(info)
        self.routable = True

    def _route(self, held: Held) -> bool:
        return self.relay.route(self, held)


class Relay:
    def __init__(self, router: Router) -> None:
        self.router = router
        self.links: list[AnonymousInLink] = []

    def attach(self, conn: ProtonSocket, info: ConnectionInfo, link: Link) -> None:
        """A client sender without a target address."""
        group = info.group
        if group is not None and not group.allow_anonymous_sender:
            _refuse(link, UNAUTHORIZED, "anonymous senders are not allowed for this user")
            return
        set_address(link.target, None)
        set_address(link.source, link.remote_source.address)
        link.open()
        inbound = AnonymousInLink(cast(Receiver, link), info.link_capacity, self, info)
        inbound.strip_in = strips_in(info.strip)
        self.links.append(inbound)
        inbound.refresh()

    @staticmethod
    def honours_annotation(info: ConnectionInfo) -> bool:
        """Does the connection keep incoming x-opt-qd annotations (qdrouterd: `no`, `out`)?"""
        return not strips_in(info.strip)

    def route(self, inbound: AnonymousInLink, held: Held) -> bool:
        """Forward one message by its own address; False to hold it until credit comes."""
        key = held.key
        first = key is None
        if key is None:
            key = self._resolve(inbound, held)
            if key is None:
                return True  # refused and settled
            held.key = key
        if not self.router.routing.reachable(key):
            held.settle_origin(RELEASED)  # presettled: dropped, as qdrouterd does
            return True
        if first:  # counted once, on the address it resolved to (retries come back here)
            self.router.routing.address_counts(key)[tally.IN_CLIENT] += 1
        return self.router.routing.route_to(held, key, None)

    def _resolve(self, inbound: AnonymousInLink, held: Held) -> str | None:
        """The routing key of a message, or None after rejecting it."""
        try:
            address = message_address(held.data, honour_annotation=inbound.honour_annotation)
        except MalformedMessageError as exc:
            reject(held, "amqp:decode-error", f"invalid message format: {exc}")
            return None
        problem = send_refusal(self.router, inbound.info, address)
        if problem is not None:
            reject(held, *problem)
            return None
        internal = inbound.info.internal(cast(str, address))
        return self.router.routing.semantics(internal).key(internal, 0)

    def retry(self) -> None:
        """Consumers, credit or the mesh changed: move what anonymous links hold."""
        if not self.links:
            return  # the common case, once per outcome: no anonymous sender here
        self.links = [link for link in self.links if not link.drained]
        for inbound in self.links:
            if inbound.held:
                inbound.retry()


def send_refusal(
    router: Router, info: ConnectionInfo, address: str | None
) -> tuple[str, str] | None:
    """Why a message to `address` from this connection is refused (condition,
    description), if it is: for anonymous senders and for wills (enmesh.router.wills)."""
    if not address:
        return "amqp:precondition-failed", "Routing failure: no address present"
    if address == WILL_ADDRESS:
        return "amqp:not-allowed", f"a will is registered on a link attached to {WILL_ADDRESS}"
    group = info.group
    if group is not None and not group.allows_target(address):
        return UNAUTHORIZED, "policy violation on target"
    if RESERVED_MARK in address:
        return "amqp:invalid-field", f"'@' is reserved in addresses: {address!r}"
    internal = info.internal(address)
    if router.routing.semantics(internal).distribution == UNAVAILABLE:
        return "amqp:not-found", "Deliveries cannot be sent to an unavailable address"
    return None


def reject(held: Held, condition: str, description: str) -> None:
    """Reject an unsettled message with a condition (a presettled one is just dropped).

    Through the message's own settlement, so one still arriving is rejected at its end.
    """
    held.settle_with(Outcome(Disposition.REJECTED, Condition(condition, description)))


def _refuse(link: Link, condition: str, description: str) -> None:
    link.open()
    link.condition = Condition(condition, description)
    link.close()
