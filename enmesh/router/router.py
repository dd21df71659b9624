"""enmesh-router: one process of the mesh, driven by one event loop.

Connection roles (from the listener or connector that made the connection):
- normal: clients. The open frame's hostname selects the vhost (address space) on a
  multi-tenant listener; every address is then `<vhost>/<address>` inside the router.
- inter-router: other routers. A control link carries router advertisements; data moves
  on transit links, one per (address, destination router), so credit and settlement
  flow hop by hop and nothing needs to be written into a message.
- route-container: brokers. autoLinks attach when the connection opens; link routes
  pair a client link with a broker link.

This module holds the router's state, its start-up and the dispatch of proton events;
the jobs those events start live in connecting (connections), clientlinks (links
clients attach), meshlinks (the inter-router control plane), routing (the address table
and forwarding), brokerlinks (autoLinks, link routes) and relay (anonymous senders).
"""

from __future__ import annotations

import functools
import logging
import time
from collections import Counter
from pathlib import Path
from typing import Any

from proton import Delivery, Endpoint, Event, Link, Session

from enmesh.router import (
    endpoints,
    peerinput,
    rawproton,
    security,
    session_window,
    streaming,
    tally,
)
from enmesh.router.admission import Admission, AdmissionSettings
from enmesh.router.brokerlinks import BrokerLinks, PairedInLink
from enmesh.router.clientlinks import ClientLinks, refuse
from enmesh.router.config import Listener, RouterConfig
from enmesh.router.connecting import (
    INTER_ROUTER,
    NORMAL,
    ROUTE_CONTAINER,
    Connecting,
    ConnectionInfo,
    ConnectorState,
    listener_name,
)
from enmesh.router.drain import StoredDrain
from enmesh.router.engine import Acceptor, Loop, ProtonSocket
from enmesh.router.engine import event_connection as _connection
from enmesh.router.engine import event_link as _link
from enmesh.router.engine import event_session as _session
from enmesh.router.forwarding import AddressState, OutLink
from enmesh.router.inlinks import InLink
from enmesh.router.mesh import Mesh
from enmesh.router.meshlinks import MeshLinks
from enmesh.router.policy import Vhost
from enmesh.router.relay import Relay
from enmesh.router.routing import Routing
from enmesh.router.will_store import WillStore
from enmesh.router.wills import Wills

log = logging.getLogger("enmesh.router")

LOCAL_UNINIT = Endpoint.LOCAL_UNINIT
_UNSET = object()


class Router:
    """Routing state and proton event handling for one router process."""

    def __init__(
        self,
        config: RouterConfig,
        loop: Loop,
        admission: AdmissionSettings | None = None,
        will_store: Path | None = None,
    ) -> None:
        self.config = config
        self.loop = loop
        self.admission = Admission(
            loop, admission or AdmissionSettings(), [listener_name(x) for x in config.listeners]
        )
        self.id = config.router.id
        self.mesh = Mesh(self.id, time.time_ns())
        self.addresses: dict[str, AddressState] = {}
        self.transit: dict[tuple[str, str], OutLink] = {}
        self.neighbours: dict[str, ProtonSocket] = {}
        self.connections: dict[int, ProtonSocket] = {}
        self._flushed_at_work = -1  # Loop.work when flush last found no connection with events
        self.connectors: dict[str, ConnectorState] = {
            c.name: ConnectorState(c) for c in config.connectors
        }
        self.acceptors: list[Acceptor] = []
        self.vhosts: dict[str, Vhost] = {v.hostname: v for v in config.vhosts}
        self.vhost_connections: Counter[str] = Counter()
        self.link_routes = BrokerLinks(self)
        self.relay = Relay(self)
        self.wills = Wills(self, WillStore(will_store))
        self.connecting = Connecting(self)
        self.client_links = ClientLinks(self)
        self.mesh_links = MeshLinks(self)
        self.routing = Routing(self)
        self.stored_drain = StoredDrain(self)
        sasl_path = config.router.sasl_config_dir
        self.sasl = security.SaslSettings(
            str(sasl_path) if sasl_path else None, config.router.sasl_config_name
        )
        self._handlers: dict[Any, Any] = {}
        self.started_at = time.time()
        self.retired = tally.Retired()  # counters of links and addresses that are gone
        self.management: Any = None  # set by enmesh.router.management
        self.reloader: Any = None  # set by enmesh.router.main (SIGHUP config reload)

    # --- start-up ------------------------------------------------------------------------

    @staticmethod
    def session_of(conn: ProtonSocket) -> Session:
        """The one session the router uses for its own links on a connection.

        A session per link would exhaust the connection's channels (and memory) over time.
        """
        session: Session | None = conn.context.get("session")
        if session is None:
            session = conn.connection.session()
            session_window.bound(session, conn.context["info"].session_frames)
            session.open()
            conn.context["session"] = session
        return session

    def flush(self) -> None:
        """Write out connections whose links were changed by work on other connections.

        proton queues an event on a connection's collector whenever one of its endpoints
        changes; a connection with queued events has something to process and write.
        """
        # large messages: bytes arrived, or proton's buffers drained
        self.loop.work += streaming.run_parked()
        if self.loop.work == self._flushed_at_work:
            return  # nothing ran since every connection was last seen without events
        for _ in range(8):
            busy = [c for c in self.connections.values() if not c.closed and c.has_events()]
            if not busy:
                self._flushed_at_work = self.loop.work
                return
            for conn in busy:
                conn.process()

    def start(self) -> None:
        self.loop.on_idle = self.flush
        for listener in self.config.listeners:
            if listener.http:
                continue  # served by enmesh.router.metrics
            acceptor = Acceptor(
                self.loop,
                listener.host,
                listener.port,
                functools.partial(self.connecting.accept, listener),
            )
            self.acceptors.append(acceptor)
            log.info("listening on %s:%s (%s)", listener.host, listener.port, listener.name)
        for state in self.connectors.values():
            self.connecting.connect(state)
        self.wills.recover()

    @property
    def policy_enabled(self) -> bool:
        return self.config.policy is not None and self.config.policy.enable_vhost_policy

    # --- proton events ---------------------------------------------------------------------

    def on_event(self, source: ProtonSocket, event: Event) -> None:
        event_type = event.type
        handler = self._handlers.get(event_type, _UNSET)
        if handler is _UNSET:  # first time: EventType.method is "on_connection_remote_open" etc.
            handler = self._handlers[event_type] = getattr(self, f"_{event_type.method}", None)
        if handler is not None:
            handler(source, event)

    def _on_connection_remote_open(self, conn: ProtonSocket, event: Event) -> None:
        info: ConnectionInfo = conn.context["info"]
        connection = _connection(event)
        info.opened_at = time.monotonic()
        self.admission.opened(info.identity)
        problem = peerinput.open_problem(connection)
        if problem is not None:
            conn.bad_input(problem)
            return
        if (
            info.role == NORMAL
            and not info.outgoing
            and not self.connecting.admit_client(conn, info)
        ):
            return
        if connection.state & LOCAL_UNINIT:
            connection.open()
        if info.role == INTER_ROUTER:
            self.mesh_links.neighbour_up(conn, info, connection.remote_container or "")
        elif info.role == ROUTE_CONTAINER:
            self.link_routes.broker_up(conn, info.name)

    def _on_session_remote_open(self, conn: ProtonSocket, event: Event) -> None:
        if _connection(event).state & Endpoint.LOCAL_CLOSED:
            return  # refused connection: its queued begins and attaches get no answer
        session = _session(event)
        if session.state & LOCAL_UNINIT:
            info: ConnectionInfo = conn.context["info"]
            session_window.bound(session, info.session_frames)
            session.open()

    def _on_link_remote_open(self, conn: ProtonSocket, event: Event) -> None:
        link = _link(event)
        info: ConnectionInfo = conn.context["info"]
        if _connection(event).state & Endpoint.LOCAL_CLOSED:
            return
        problem = peerinput.attach_problem(link)
        if problem is not None:
            conn.bad_input(problem)
            return
        if not link.state & LOCAL_UNINIT:
            self.link_routes.on_remote_open(link)  # our own attach, confirmed
            return
        if info.role == NORMAL:
            self.client_links.attach(conn, info, link)
        elif info.role == INTER_ROUTER:
            self.mesh_links.attach(conn, info, link)
        else:
            refuse(link, "amqp:not-allowed", "brokers may not attach links to the router")

    def on_raw_link_flow(self, conn: ProtonSocket, event: Any) -> None:
        """A peer's credit, as proton's pointer (ProtonSocket.process). What the router
        keeps for the link is in its attribute record, and the links it acts on are the
        wrappers its own objects hold: no Event or Link wrapper per flow."""
        link = rawproton.event_link(event)
        attrs = rawproton.link_attrs(link) or {}
        partner: PairedInLink | None = attrs.get("enmesh_partner_in")  # a routed link's
        out: OutLink | None = attrs.get("enmesh_out")
        if out is not None:
            out.pump()
            if partner is not None:
                self.link_routes.on_flow(partner)
            self.routing.retry_key(out.key)
            if rawproton.link_drain(link) and not out.waiting and not self.stored_drain.start(out):
                out.link.drained()  # nothing to send now: give the consumer its credit back
                self.routing.retry_key(out.key)  # credit given back is no longer demand for stored
        elif attrs.get("enmesh_control_sender", False):
            self.mesh_links.send_control(conn)
        else:
            inbound: InLink | None = attrs.get("enmesh_in")
            if inbound is not None and (
                inbound.link.drain_mode or inbound.key in self.stored_drain.waiting
            ):  # a broker link's drain answered, whoever still waits for it
                self.stored_drain.on_source_flow(inbound)
            if partner is not None:
                self.link_routes.on_flow(partner)

    def on_raw_delivery(self, conn: ProtonSocket, delivery: Any) -> None:
        """A delivery event, as proton's pointer (the per-message path: rawproton).

        Messages in and outcomes back reach their InLink and OutLink without a wrapper;
        the control and management links' requests get the wrapped delivery."""
        link = rawproton.delivery_link(delivery)
        attrs = rawproton.link_attrs(link) or {}
        inbound: InLink | None = attrs.get("enmesh_in")
        if inbound is not None:
            inbound.on_delivery()
            return
        out: OutLink | None = attrs.get("enmesh_out")
        if out is None:
            if rawproton.link_is_receiver(link):
                self._on_request(conn, Delivery.wrap(delivery))  # type: ignore[no-untyped-call]
        elif rawproton.delivery_updated(delivery):
            out.on_disposition(rawproton.delivery_tag(delivery))
            self.routing.close_if_idle(out)
            self.routing.retry_held(
                out.key
            )  # an outcome frees a balanced slot; reachability is unchanged

    def _on_request(self, conn: ProtonSocket, delivery: Delivery) -> None:
        """A message on the router's own links: mesh control, management requests."""
        link = delivery.link
        if getattr(link, "enmesh_control", False):
            self.mesh_links.control_message(conn, link, delivery)
        elif self.management is not None and getattr(link, "enmesh_management", False):
            self.management.on_request(conn, link, delivery)

    def _on_link_remote_close(self, conn: ProtonSocket, event: Event) -> None:
        link = _link(event)
        closed_here_first = bool(link.state & Endpoint.LOCAL_CLOSED)
        self.wills.detached(link)
        self.routing.forget_link(link)
        self.link_routes.on_remote_close(link)
        if link.state & LOCAL_UNINIT:
            link.open()  # e.g. a link route still waiting for the broker: answer, then close
        if closed_here_first:
            endpoints.release(link)
        elif not link.state & Endpoint.LOCAL_CLOSED:
            link.close()  # released when its local-close event comes round

    _on_link_remote_detach = _on_link_remote_close

    def _on_link_local_close(self, conn: ProtonSocket, event: Event) -> None:
        link = _link(event)
        if endpoints.closed_both_ways(link):  # the peer's detach came first
            endpoints.release(link)

    _on_link_local_detach = _on_link_local_close

    def _on_session_remote_close(self, conn: ProtonSocket, event: Event) -> None:
        session = _session(event)
        # Ending a session detaches its links with no detach of their own (AMQP 1.0 2.5.5):
        # they leave the routing tables as if their connection had gone. RabbitMQ ends the
        # router's session when a queue one of its links consumes from is deleted.
        lost = rawproton.session_links(session)
        auto_links = [a for a in (getattr(x, "enmesh_auto_link", None) for x in lost) if a]
        # A link-routed link's partner on the broker's connection may still touch it
        # (BrokerLinks detaches it after a grace): those stay until the connection goes.
        freeable = [x for x in lost if not endpoints.link_routed(x)]
        self._forget_links(lost)
        if conn.context.get("session") == session:
            del conn.context["session"]  # the router's next links go on a new session
        if session.state & Endpoint.LOCAL_ACTIVE:
            session.close()
        # Ended both ways: proton may let the links and the session go. A client that
        # keeps its connection and ends sessions (the MQTT gateway ends one per device)
        # would otherwise leave them allocated for as long as its connection lives.
        for link in freeable:
            endpoints.release(link)
        if len(freeable) == len(lost):
            session.free()
        info: ConnectionInfo = conn.context["info"]
        condition = session.remote_condition
        if lost and (condition is not None or info.role == ROUTE_CONTAINER):
            log.warning(
                "connection %s (%s %s) ended a session with %d links%s",
                conn.peer,
                info.role,
                info.name,
                len(lost),
                f": {condition.name}: {condition.description}" if condition else "",
            )
        elif lost:  # a client ending a session of its own accord (a device leaving)
            log.debug("connection %s ended a session with %d links", conn.peer, len(lost))
        if info.role == ROUTE_CONTAINER and auto_links:
            was_batch = bool(getattr(session, "enmesh_autolink_batch", False))
            self.link_routes.reattach_later(conn, info.name, auto_links, was_batch)

    def _on_connection_remote_close(self, conn: ProtonSocket, event: Event) -> None:
        if _connection(event).state & Endpoint.LOCAL_ACTIVE:
            _connection(event).close()

    def on_raw_transport(self, conn: ProtonSocket, event: Any) -> None:
        """Proton has output (PN_TRANSPORT, as its pointer: ProtonSocket.process); while a
        login is undecided, it may be its outcome."""
        self.admission.check_login(conn, conn.context["info"].identity)

    def _on_transport_error(self, conn: ProtonSocket, event: Event) -> None:
        condition = conn.transport.condition
        info: ConnectionInfo = conn.context["info"]
        log.info(
            "connection %s (%s %s): %s",
            conn.peer,
            info.role,
            info.name,
            f"{condition.name}: {condition.description}" if condition else "transport error",
        )

    def on_closed(self, conn: ProtonSocket) -> None:
        info: ConnectionInfo = conn.context["info"]
        relay = conn.context.get("sasl_relay")
        if relay is not None:
            relay.abandon()  # its link to the auth service, if still open
        self.admission.closed(conn, info.identity)
        self.connections.pop(info.identity, None)
        self._forget_links(_links(conn))
        if info.counted_vhost is not None:
            self.vhost_connections[info.counted_vhost] -= 1
        if info.neighbour is not None and self.neighbours.get(info.neighbour) is conn:
            del self.neighbours[info.neighbour]
            self.mesh_links.neighbours_changed()
        if info.role == ROUTE_CONTAINER:
            self.link_routes.broker_down(info.name, conn)
        state = self.connectors.get(info.name) if info.outgoing else None
        if state is not None and state.socket is conn:
            self.connecting.retry(state, info.opened_at)

    def _forget_links(self, links: list[Link]) -> None:
        """Links gone without a detach (their session or connection ended): out of routing,
        their routed partners detached, the router's objects dropped from them."""
        for link in links:
            self.wills.lost(link)
            self.routing.forget_link(link)
            self.link_routes.on_connection_lost(link)
        for link in links:
            endpoints.forget_attributes(link)

    def listener_named(self, name: str) -> Listener | None:
        return next((x for x in self.config.listeners if listener_name(x) == name), None)


def _links(conn: ProtonSocket) -> list[Link]:
    links: list[Link] = []
    link = conn.connection.link_head(0)
    while link is not None:
        links.append(link)
        link = link.next(0)
    return links
