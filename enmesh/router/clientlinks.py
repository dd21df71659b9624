"""Links clients attach: authorization, refusal, and what each link becomes.

A client's receiver becomes a destination (OutLink) of its address's routing key, its
sender a source (InLink); on the way the user's policy group is checked, `$management`,
dynamic (reply) sources, link routes and anonymous senders (enmesh.router.relay) are
told apart, and an attach the router cannot serve is refused as qdrouterd refuses it.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, cast

from proton import Condition, Link, Receiver, Sender

from enmesh.router.addressing import best_match
from enmesh.router.annotations import node_id, strips_in, strips_out
from enmesh.router.forwarding import OutLink, set_address
from enmesh.router.inlinks import InLink
from enmesh.router.relay import WILL_ADDRESS
from enmesh.router.routing import DYNAMIC_PREFIX, WAYPOINT_PHASE_MARK
from enmesh.suggest import suggest

if TYPE_CHECKING:
    from enmesh.router.connecting import ConnectionInfo
    from enmesh.router.engine import ProtonSocket
    from enmesh.router.router import Router

MANAGEMENT_ADDRESS = "$management"
UNAUTHORIZED = "amqp:unauthorized-access"
NOT_FOUND = "amqp:not-found"
UNAVAILABLE = "unavailable"  # an address distribution: attaches refused, as qdrouterd does


class ClientLinks:
    """What the router does with a link a client attaches."""

    def __init__(self, router: Router) -> None:
        self.router = router

    def attach(self, conn: ProtonSocket, info: ConnectionInfo, link: Link) -> None:
        """A link a client attached: refused, or made a source or destination."""
        receiving = link.is_sender  # the router sends: the client receives
        if receiving and link.remote_source.dynamic:
            self._dynamic_consumer(conn, info, link)
            return
        address = (link.remote_source if receiving else link.remote_target).address
        if not address:
            if receiving:
                refuse(link, "amqp:invalid-field", "a receiver needs a source address")
            else:
                self.router.relay.attach(conn, info, link)
            return
        if address == WILL_ADDRESS:  # every client may leave a will; its `to` is checked
            self.router.wills.attach(info, link)
            return
        group = info.group
        if group is not None and not (
            group.allows_source(address) if receiving else group.allows_target(address)
        ):
            patterns = group.sources if receiving else group.targets
            refuse(link, *self._refusal(info, address, receiving, patterns))
            return
        if address == MANAGEMENT_ADDRESS and self.router.management is not None:
            self._management_link(conn, info, link, receiving)
            return
        if receiving and address.startswith(DYNAMIC_PREFIX):
            refuse(link, UNAUTHORIZED, "temporary addresses are only for their creator")
            return
        if _reserved(link, address):
            return
        internal = info.internal(address)
        if self.router.link_routes.try_route(
            conn, info, link, internal, "in" if receiving else "out"
        ):
            return
        if self.router.routing.semantics(internal).distribution == UNAVAILABLE:
            refuse(link, NOT_FOUND, "Node not found")  # qdrouterd's words
            return
        add = self._add_consumer if receiving else self._add_producer
        add(info, link, internal, address)

    def _refusal(
        self, info: ConnectionInfo, address: str, receiving: bool, patterns: tuple[str, ...]
    ) -> tuple[str, str]:
        """Why a link the policy refuses is refused: an address no `address` or `linkRoute`
        of the client's space serves is unknown (with the nearest ones the user may use),
        anything else is not allowed."""
        internal = info.internal(address)
        config = self.router.config
        served = best_match(config.addresses, internal) or best_match(config.link_routes, internal)
        if served is None and not address.startswith(("$", DYNAMIC_PREFIX)):
            where = f" in address space {info.vhost_name!r}" if info.vhost_name else ""
            allowed = [p for p in patterns if not p.endswith("*") and not p.startswith("$")]
            return NOT_FOUND, f"no address {address!r}{where}{suggest(address, allowed)}"
        verb = "receive from" if receiving else "send to"
        return UNAUTHORIZED, f"no permission to {verb} {address!r}"

    def _management_link(
        self, conn: ProtonSocket, info: ConnectionInfo, link: Link, receiving: bool
    ) -> None:
        if receiving:
            self.router.management.attach_reply_link(conn, info, link)
        elif info.group is not None and MANAGEMENT_ADDRESS not in info.group.targets:
            refuse(link, UNAUTHORIZED, "management needs the manage right")
        else:
            self.router.management.attach_request_link(conn, info, link)

    def _dynamic_consumer(self, conn: ProtonSocket, info: ConnectionInfo, link: Link) -> None:
        if info.group is not None and not info.group.allow_dynamic_source:
            refuse(link, UNAUTHORIZED, "no permission for dynamic sources")
            return
        address = f"{DYNAMIC_PREFIX}{self.router.id}.{info.identity}.{secrets.token_hex(8)}"
        link.source.address = address
        self._add_consumer(info, link, info.internal(address), address)

    def _add_consumer(self, info: ConnectionInfo, link: Link, internal: str, address: str) -> None:
        semantics = self.router.routing.semantics(internal)
        key = semantics.key(internal, 1)
        if not link.source.address:
            link.source.address = address
        set_address(link.target, link.remote_target.address)
        link.open()
        # Multicast too: a copy goes settled or not as its producer sent it (qdrouterd 1.19).
        out = OutLink(cast(Sender, link), key, info.link_capacity)
        out.trace_as = None if strips_out(info.strip) else node_id(self.router.id)
        self.router.routing.add_destination(out)

    def _add_producer(self, info: ConnectionInfo, link: Link, internal: str, address: str) -> None:
        semantics = self.router.routing.semantics(internal)
        link.target.address = address
        set_address(link.source, link.remote_source.address)
        link.open()
        receiver = cast(Receiver, link)
        inbound = InLink(
            receiver, semantics.key(internal, 0), info.link_capacity, self.router.routing.route
        )
        inbound.strip_in = strips_in(info.strip)
        self.router.routing.add_source(inbound)


def _reserved(link: Link, address: str) -> bool:
    """Refuse addresses clients may not name: `@` marks the router's waypoint phases."""
    if WAYPOINT_PHASE_MARK in address:
        refuse(link, "amqp:invalid-field", f"'@' is reserved in addresses: {address!r}")
        return True
    return False


def refuse(link: Link, condition: str, description: str) -> None:
    """Attach then detach with a condition: how AMQP says no to a link."""
    link.open()
    link.condition = Condition(condition, description)
    link.close()
