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
import time
from typing import TYPE_CHECKING, Any, cast

from proton import Condition, Endpoint, Link, Receiver, Sender, Session

from enmesh.router import session_window
from enmesh.router.addressing import best_match
from enmesh.router.forwarding import Held, OutLink, set_address
from enmesh.router.inlinks import InLink

if TYPE_CHECKING:
    from enmesh.router.config import AutoLink, LinkRoute
    from enmesh.router.connecting import ConnectionInfo
    from enmesh.router.engine import ProtonSocket
    from enmesh.router.router import Router

log = logging.getLogger("enmesh.router.brokers")
NO_ROUTE = "qd:no-route-to-dest"
# Inter-router links of a link route: `_mesh/route/<router with the broker>/<address>`.
ROUTE_PREFIX = "_mesh/route/"
BROKER_DETACH_GRACE_SECONDS = 1.0
# autoLinks whose session the broker ended are attached again on a new session after a
# delay doubling from the first to the last figure while the broker keeps ending them
# (a queue still missing), back to the first once a session has lasted a minute. A batch
# ended again is split in two, each half on a session of its own: RabbitMQ ends a whole
# session for one refused attach, and this way the autoLink it keeps refusing ends up
# alone while the others stay attached.
REATTACH_FIRST_SECONDS = 1.0
REATTACH_MAX_SECONDS = 30.0
REATTACH_CALM_SECONDS = 60.0


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
        for auto in self.router.config.auto_links:
            if _serves(auto, name, container):
                self._attach_auto_link(conn, auto)
        self.router.mesh_links.advertise_soon()  # its link routes, to the rest of the mesh
        log.info("broker connection %s up", name)

    def add_auto_link(self, auto: AutoLink) -> None:
        """A new autoLink of a running router: attach it on the live brokers it names."""
        for name, conn in list(self.brokers.items()):
            container = conn.connection.remote_container or ""
            if not conn.closed and _serves(auto, name, container):
                self._attach_auto_link(conn, auto)

    def remove_auto_link(self, auto: AutoLink) -> None:
        """An autoLink taken out of a running router's config: detach its links."""
        for conn in {id(c): c for c in self.brokers.values()}.values():
            link = conn.connection.link_head(0)
            while link is not None:
                following = link.next(0)
                if getattr(link, "enmesh_auto_link", None) == auto:
                    self.router.routing.forget_link(link)
                    _detach(link, None)
                link = following

    def _attach_auto_link(
        self, conn: ProtonSocket, auto: AutoLink, session: Session | None = None
    ) -> None:
        capacity = conn.context["info"].link_capacity
        session = session or self.router.session_of(conn)
        key = self.router.routing.semantics(auto.address).key(auto.address, auto.phase)
        if auto.direction == "out":
            sender = session.sender(f"autolink/{auto.address}/out")
            sender.enmesh_auto_link = auto
            sender.source.address = auto.address
            sender.target.address = auto.external_address
            sender.open()
            self.router.routing.add_destination(OutLink(sender, key, capacity))
        else:
            receiver = session.receiver(f"autolink/{auto.address}/in")
            receiver.enmesh_auto_link = auto
            receiver.snd_settle_mode = Link.SND_UNSETTLED  # the broker keeps ownership
            receiver.source.address = auto.external_address
            receiver.target.address = auto.address
            receiver.open()
            inbound = InLink(receiver, key, capacity, self.router.routing.route)
            inbound.modified_as_released = True
            self.router.routing.add_source(inbound)

    def reattach_later(
        self, conn: ProtonSocket, name: str, autos: list[AutoLink], was_batch: bool
    ) -> None:
        """The broker ended the session these autoLinks were on: attach them again soon.
        `was_batch`: that session was itself one of these re-attached batches."""
        now = time.monotonic()
        last_loss: float | None = conn.context.get("session_lost_at")
        delay: float = conn.context.get("reattach_delay", REATTACH_FIRST_SECONDS)
        if last_loss is None or now - last_loss > REATTACH_CALM_SECONDS:
            delay = REATTACH_FIRST_SECONDS
        conn.context["session_lost_at"] = now
        conn.context["reattach_delay"] = min(delay * 2, REATTACH_MAX_SECONDS)
        log.info("broker %s: attaching %d autoLinks again in %.0f s", name, len(autos), delay)
        half = len(autos) // 2
        batches = [autos[:half], autos[half:]] if was_batch and half else [autos]
        for batch in batches:
            self.router.loop.call_later(delay, functools.partial(self._reattach, conn, name, batch))

    def _reattach(self, conn: ProtonSocket, name: str, autos: list[AutoLink]) -> None:
        if conn.closed or self.brokers.get(name) is not conn:
            return  # the next connection to this broker attaches every autoLink anyway
        configured = self.router.config.auto_links
        wanted = [auto for auto in autos if auto in configured]  # not taken out meanwhile
        if not wanted:
            return
        session = conn.connection.session()
        session_window.bound(session, conn.context["info"].session_frames)
        session.open()
        session.enmesh_autolink_batch = True
        for auto in wanted:
            self._attach_auto_link(conn, auto, session)

    def broker_down(self, name: str, conn: ProtonSocket) -> None:
        if self.brokers.get(name) is conn:  # a newer connection may already serve it
            del self.brokers[name]
        container = conn.connection.remote_container or ""
        if self.containers.get(container) is conn:
            del self.containers[container]
        self.router.mesh_links.advertise_soon()
        log.info("broker connection %s down; reconnecting", name)

    # --- link routes -----------------------------------------------------------------------

    def try_route(
        self, conn: ProtonSocket, info: ConnectionInfo, link: Link, internal: str, direction: str
    ) -> bool:
        """Pair a client link with a broker link if a link route matches; True if handled."""
        route, broker = self._route_for(internal, direction)
        if route is None:
            return False
        if broker is not None:
            self._pair(conn, info, link, broker, _external(route, internal))
            return True
        # The broker is attached to another router: pass the attach toward the nearest.
        remote = self.router.mesh.routers_with_link_route(route_id(route))
        destination = remote[0][1] if remote else None
        if destination is None or not self._toward(conn, info, link, destination, internal):
            named = route.connection or route.container_id
            _detach(link, Condition(NO_ROUTE, f"broker {named!r} is not connected"))
        return True

    def from_mesh(self, conn: ProtonSocket, info: ConnectionInfo, link: Link) -> bool:
        """An attach another router passes on for a link route; False if it is not one."""
        address = (link.remote_source if link.is_sender else link.remote_target).address or ""
        if not address.startswith(ROUTE_PREFIX):
            return False
        destination, _, internal = address[len(ROUTE_PREFIX) :].partition("/")
        route, broker = self._route_for(internal, "in" if link.is_sender else "out")
        if destination != self.router.id:
            if not self._toward(conn, info, link, destination, internal):
                _detach(link, Condition(NO_ROUTE, f"no path to router {destination!r}"))
        elif route is None or broker is None:
            _detach(link, Condition(NO_ROUTE, f"no broker here for {internal!r}"))
        else:
            self._pair(conn, info, link, broker, _external(route, internal))
        return True

    def available(self) -> list[str]:
        """Link routes whose broker is connected here: what this router advertises."""
        routes = self.router.config.link_routes
        return sorted({route_id(r) for r in routes if self._broker_for(r) is not None})

    def _route_for(
        self, internal: str, direction: str
    ) -> tuple[LinkRoute | None, ProtonSocket | None]:
        """The link route for `internal` and its broker connection here, if any. Routes of
        one prefix to several connections (the nodes of a cluster) are alternatives: the
        first whose broker is connected serves."""
        routes = [r for r in self.router.config.link_routes if r.direction == direction]
        best = best_match(routes, internal)
        if best is None:
            return None, None
        for route in routes:
            if route_id(route) == route_id(best):
                broker = self._broker_for(route)
                if broker is not None:
                    return route, broker
        return best, None

    def _broker_for(self, route: LinkRoute) -> ProtonSocket | None:
        if route.connection is not None:
            broker = self.brokers.get(route.connection)
        else:
            broker = self.containers.get(route.container_id or "")
        return broker if broker is not None and not broker.closed else None

    def _toward(
        self,
        conn: ProtonSocket,
        info: ConnectionInfo,
        link: Link,
        destination: str,
        internal: str,
    ) -> bool:
        """Pair `link` with one to the next router on the path to `destination`."""
        hop = self.router.mesh.routes.next_hop.get(destination)
        neighbour = self.router.neighbours.get(hop) if hop else None
        if neighbour is None or neighbour.closed:
            return False
        self._pair(conn, info, link, neighbour, f"{ROUTE_PREFIX}{destination}/{internal}")
        return True

    def _pair(
        self, conn: ProtonSocket, info: ConnectionInfo, link: Link, to: ProtonSocket, address: str
    ) -> None:
        """Attach the other half of a routed link on `to` (a broker or the next router).

        The client's link is answered when that attach is (on_remote_open).
        """
        session = self.router.session_of(to)
        name = f"route/{info.identity}/{link.name}"
        peer: Link
        if link.is_sender:  # the client receives from the broker
            peer = session.receiver(name)
            peer.source.address = address
            peer.source.durability = link.remote_source.durability
            peer.source.expiry_policy = link.remote_source.expiry_policy
            set_address(peer.target, link.remote_target.address)
            # Ask for unsettled deliveries: the client's outcome settles them.
            peer.snd_settle_mode = Link.SND_UNSETTLED
        else:
            peer = session.sender(name)
            peer.target.address = address
            set_address(peer.source, link.remote_source.address)
        peer.enmesh_client = link
        peer.enmesh_client_socket = conn
        link.enmesh_peer = peer
        link.enmesh_peer_socket = to
        link.enmesh_capacity = info.link_capacity
        peer.open()

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

    def on_flow(self, partner: PairedInLink) -> None:
        """Credit on a routed link: its partner's messages may move."""
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
        self.router.routing.forget_link(partner)
        if (
            inbound is not None
            and getattr(link, "enmesh_peer", None) is partner
            and _to_broker(link)
        ):
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


def route_id(route: LinkRoute) -> str:
    """How routers name a link route to each other: `<direction> <prefix or pattern>`."""
    return f"{route.direction} {route.prefix if route.prefix is not None else route.pattern}"


def _external(route: LinkRoute, internal: str) -> str:
    """The broker's address for `internal`: the route's external prefixes applied."""
    external = internal
    if route.del_external_prefix and internal.startswith(route.del_external_prefix):
        external = internal[len(route.del_external_prefix) :]
    return (route.add_external_prefix or "") + external


def _to_broker(client: Link) -> bool:
    """Is the other half of this routed link on a broker connection (not the next router)?"""
    peer: ProtonSocket | None = getattr(client, "enmesh_peer_socket", None)
    return peer is not None and peer.context["info"].role == "route-container"
