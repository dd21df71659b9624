"""Links to route-containers (brokers): autoLinks and link routes.

autoLinks attach when a broker connection opens: an `out` autoLink is a destination
for the address's phase 0 (producers' messages go to the broker), an `in` autoLink is a
source for phase 1 (the broker feeds consumers). A link route pairs a client's link
with a link the router attaches to the broker, address rewritten by the route's
external prefixes; credit mirrors the consumer side, and dispositions and detaches
pass through both ways.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any, cast

from proton import Condition, Endpoint, Link, Receiver, Sender

from enmesh.router.addressing import best_match
from enmesh.router.forwarding import Held, InLink, OutLink, set_address

if TYPE_CHECKING:
    from enmesh.router.config import AutoLink
    from enmesh.router.engine import ProtonSocket
    from enmesh.router.router import ConnectionInfo, Router

log = logging.getLogger("enmesh.router.brokers")
NO_ROUTE = "qd:no-route-to-dest"
BROKER_DETACH_GRACE_SECONDS = 1.0


class PairedInLink(InLink):
    """The receiving half of a link route: credit follows what the sending half can take."""

    def __init__(self, link: Link, out: OutLink, capacity: int) -> None:
        super().__init__(cast(Receiver, link), "", capacity, self._forward)
        self.out = out
        self.routable = True

    def _forward(self, held: Held) -> bool:
        self.out.offer(held)
        return True

    def refresh(self) -> None:
        if self.closed:
            return
        if self.out.closed:  # the client is gone: ask the broker for nothing more
            self.grant(0, may_reduce=True)
            return
        self.grant(self.out.link.credit - len(self.out.waiting) - len(self.held), may_reduce=True)


class BrokerLinks:
    def __init__(self, router: Router) -> None:
        self.router = router
        self.brokers: dict[str, ProtonSocket] = {}
        self.containers: dict[str, ProtonSocket] = {}  # by the broker's open container-id

    # --- autoLinks -------------------------------------------------------------------------

    def broker_up(self, conn: ProtonSocket, name: str) -> None:
        self.brokers[name] = conn
        container = conn.connection.remote_container or ""
        self.containers[container] = conn
        capacity = conn.context["info"].link_capacity
        for auto in self.router.config.auto_links:
            if not _serves(auto, name, container):
                continue
            session = self.router.session_of(conn)
            key = self.router.semantics(auto.address).key(auto.address, auto.phase)
            if auto.direction == "out":
                sender = session.sender(f"autolink/{auto.address}/out")
                sender.source.address = auto.address
                sender.target.address = auto.external_address
                sender.open()
                self.router.add_destination(OutLink(sender, key, capacity))
            else:
                receiver = session.receiver(f"autolink/{auto.address}/in")
                receiver.snd_settle_mode = Link.SND_UNSETTLED  # the broker keeps ownership
                receiver.source.address = auto.external_address
                receiver.target.address = auto.address
                receiver.open()
                inbound = InLink(receiver, key, capacity, self.router.route)
                inbound.modified_as_released = True
                self.router.add_source(inbound)
        log.info("broker connection %s up", name)

    def broker_down(self, name: str, conn: ProtonSocket) -> None:
        if self.brokers.get(name) is conn:  # a newer connection may already serve it
            del self.brokers[name]
        container = conn.connection.remote_container or ""
        if self.containers.get(container) is conn:
            del self.containers[container]
        log.info("broker connection %s down; reconnecting", name)

    # --- link routes -----------------------------------------------------------------------

    def try_route(
        self, conn: ProtonSocket, info: ConnectionInfo, link: Link, internal: str, direction: str
    ) -> bool:
        """Pair a client link with a broker link if a link route matches; True if handled."""
        routes = [r for r in self.router.config.link_routes if r.direction == direction]
        route = best_match(routes, internal)
        if route is None:
            return False
        if route.connection is not None:
            broker = self.brokers.get(route.connection)
        else:
            broker = self.containers.get(route.container_id or "")
        if broker is None or broker.closed:
            link.open()
            named = route.connection or route.container_id
            link.condition = Condition(NO_ROUTE, f"broker {named!r} is not connected")
            link.close()
            return True
        external = internal
        if route.del_external_prefix and internal.startswith(route.del_external_prefix):
            external = internal[len(route.del_external_prefix) :]
        external = (route.add_external_prefix or "") + external
        session = self.router.session_of(broker)
        name = f"route/{info.identity}/{link.name}"
        peer: Link
        if direction == "in":  # the client receives from the broker
            peer = session.receiver(name)
            peer.source.address = external
            peer.source.durability = link.remote_source.durability
            peer.source.expiry_policy = link.remote_source.expiry_policy
            set_address(peer.target, link.remote_target.address)
            # Ask the broker for unsettled deliveries: the client's outcome settles them.
            peer.snd_settle_mode = Link.SND_UNSETTLED
        else:
            peer = session.sender(name)
            peer.target.address = external
            set_address(peer.source, link.remote_source.address)
        peer.enmesh_client = link
        peer.enmesh_client_socket = conn
        link.enmesh_peer = peer
        link.enmesh_peer_socket = broker
        link.enmesh_capacity = info.link_capacity
        peer.open()
        return True

    def on_remote_open(self, link: Link) -> None:
        """The broker accepted our half of a link route: answer the client's attach."""
        client: Link | None = getattr(link, "enmesh_client", None)
        if client is None or not client.state & Endpoint.LOCAL_UNINIT:
            return
        if link.is_receiver and link.remote_source.address is None:
            return  # refused: a detach follows
        if link.is_sender and link.remote_target.address is None:
            return
        set_address(client.source, client.remote_source.address)
        set_address(client.target, client.remote_target.address)
        client.open()
        capacity: int = getattr(client, "enmesh_capacity", 250)
        if link.is_receiver:  # broker -> client
            out = OutLink(cast(Sender, client), "", capacity)
            paired = PairedInLink(link, out, capacity)
            paired.modified_as_released = True
            client.enmesh_partner_in = paired
            paired.refresh()
        else:  # client -> broker
            out = OutLink(cast(Sender, link), "", capacity)
            link.enmesh_partner_in = PairedInLink(client, out, capacity)
            link.enmesh_partner_in.refresh()

    def on_flow(self, link: Link) -> None:
        partner: PairedInLink | None = getattr(link, "enmesh_partner_in", None)
        if partner is not None:
            partner.out.pump()
            partner.refresh()

    def on_remote_close(self, link: Link) -> None:
        self._close_partner(link, link.remote_condition)

    def on_connection_lost(self, link: Link) -> None:
        self._close_partner(link, Condition(NO_ROUTE, "the other end of the route went away"))

    def _close_partner(self, link: Link, condition: Any) -> None:
        found: Link | None = getattr(link, "enmesh_client", None) or getattr(
            link, "enmesh_peer", None
        )
        if found is None or found.state & Endpoint.LOCAL_CLOSED:
            return
        partner: Link = found
        inbound: InLink | None = getattr(partner, "enmesh_in", None)
        if inbound is not None and not inbound.closed:
            # Credit first, so nothing given back comes straight back on this link; then
            # give back what the client left unsettled (held here, or never sent on).
            inbound.grant(0, may_reduce=True)
            inbound.release_held()
        self.router.forget_link(partner)
        if inbound is not None and getattr(link, "enmesh_peer", None) is partner:
            # A broker link the client left: detach after a grace. RabbitMQ keeps a message
            # it had in flight to a link that detaches unacknowledged, held from every
            # consumer, until the session (the router's, long-lived) ends; arriving before
            # the detach, it is released (InLink.on_delivery) and goes back to the queue.
            self.router.loop.call_later(
                BROKER_DETACH_GRACE_SECONDS, functools.partial(_detach, partner, condition)
            )
            return
        _detach(partner, condition)


def _serves(entry: AutoLink, name: str, container: str) -> bool:
    """An autoLink (or linkRoute) names its broker's connection or its container-id."""
    if entry.connection is not None:
        return entry.connection == name
    return entry.container_id == container


def _detach(link: Link, condition: Any) -> None:
    if link.state & Endpoint.LOCAL_CLOSED:
        return
    if link.state & Endpoint.LOCAL_UNINIT:
        link.open()
    if condition is not None:
        link.condition = condition
    link.close()
