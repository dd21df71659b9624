"""enmesh-router: one process of the mesh, driven by one event loop.

Connection roles (from the listener or connector that made the connection):
- normal: clients. The open frame's hostname selects the vhost (address space) on a
  multi-tenant listener; every address is then `<vhost>/<address>` inside the router.
- inter-router: other routers. A control link carries router advertisements; data moves
  on transit links, one per (address, destination router), so credit and settlement
  flow hop by hop and nothing needs to be written into a message.
- route-container: brokers. autoLinks attach when the connection opens; link routes
  pair a client link with a broker link.
"""

from __future__ import annotations

import functools
import logging
import secrets
import socket
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, cast

from proton import (
    Condition,
    Connection,
    Delivery,
    Endpoint,
    Event,
    Link,
    Message,
    Receiver,
    Sender,
    Session,
    Transport,
)

from enmesh.router import demand, endpoints, peerinput, security, streaming, tally, tenancy
from enmesh.router.addressing import AddressSemantics, best_match
from enmesh.router.admission import Admission, AdmissionSettings
from enmesh.router.annotations import node_id, strips_in, strips_out
from enmesh.router.brokerlinks import BrokerLinks
from enmesh.router.config import Connector, Listener, RouterConfig, resolve_password
from enmesh.router.config_model import StripAnnotations
from enmesh.router.engine import Acceptor, Loop, ProtonSocket, connect_nonblocking
from enmesh.router.forwarding import (
    RELEASED,
    AddressState,
    Held,
    InLink,
    OutLink,
    choose_balanced,
    set_address,
)
from enmesh.router.mesh import Mesh, RouterAdvertisement
from enmesh.router.outcomes import Fanout
from enmesh.router.policy import Vhost, VhostGroup
from enmesh.router.relay import CAPABILITY as RELAY_CAPABILITY
from enmesh.router.relay import Relay
from enmesh.router.saslscreen import SaslInputScreen

log = logging.getLogger("enmesh.router")

CONTROL_ADDRESS = "_mesh/control"
DYNAMIC_PREFIX = "_dynamic."
WAYPOINT_PHASE_MARK = "@"  # routing keys of waypoint phases: `<address>@<phase>`
TRANSIT_PREFIX = "_mesh/"
CONTROL_CREDIT = 1000
OFFERED_CAPABILITIES = [RELAY_CAPABILITY]  # as qdrouterd's open frame
MANAGEMENT_ADDRESS = "$management"
UNAUTHORIZED = "amqp:unauthorized-access"
UNAVAILABLE = "unavailable"  # an address distribution: attaches refused, as qdrouterd does
NORMAL, INTER_ROUTER, ROUTE_CONTAINER = "normal", "inter-router", "route-container"
LOCAL_UNINIT = Endpoint.LOCAL_UNINIT
_UNSET = object()
# Addresses seen keep their counters when their last link goes (stable /metrics series),
# up to this many; beyond it, an idle address that is not configured is forgotten.
MAX_KNOWN_ADDRESSES = 10_000


@dataclass
class ConnectionInfo:
    """What the router knows about a connection; kept in ProtonSocket.context."""

    role: str
    name: str  # listener or connector name
    outgoing: bool
    multi_tenant: bool = False
    link_capacity: int = 250
    vhost: Vhost | None = None
    vhost_name: str = ""
    user: str = ""
    group: VhostGroup | None = None
    neighbour: str | None = None
    counted_vhost: str | None = None  # the vhost whose connection count includes this one
    identity: int = 0
    opened_at: float | None = None  # time.monotonic() of the peer's open (management)
    strip: StripAnnotations = StripAnnotations.BOTH  # the listener's or connector's

    def internal(self, address: str) -> str:
        return f"{self.vhost_name}/{address}" if self.multi_tenant and self.vhost_name else address


@dataclass
class ConnectorState:
    config: Connector
    socket: ProtonSocket | None = None
    backoff: float = 0.1


class Router:
    """Routing state and proton event handling for one router process."""

    def __init__(
        self, config: RouterConfig, loop: Loop, admission: AdmissionSettings | None = None
    ) -> None:
        self.config = config
        self.loop = loop
        self.admission = Admission(
            loop, admission or AdmissionSettings(), [_listener_name(x) for x in config.listeners]
        )
        self.id = config.router.id
        self.mesh = Mesh(self.id, time.time_ns())
        self.addresses: dict[str, AddressState] = {}
        self.transit: dict[tuple[str, str], OutLink] = {}
        self.neighbours: dict[str, ProtonSocket] = {}
        self.connections: dict[int, ProtonSocket] = {}
        self.connectors: dict[str, ConnectorState] = {
            c.name: ConnectorState(c) for c in config.connectors
        }
        self.acceptors: list[Acceptor] = []
        self.vhosts: dict[str, Vhost] = {v.hostname: v for v in config.vhosts}
        self.vhost_connections: Counter[str] = Counter()
        self.link_routes = BrokerLinks(self)
        self.relay = Relay(self)
        sasl_path = config.router.sasl_config_path
        self.sasl = security.SaslSettings(
            str(sasl_path) if sasl_path else None, config.router.sasl_config_name
        )
        self._advertise_scheduled = False
        self._handlers: dict[Any, Any] = {}
        self._connection_ids = iter(range(1, 1 << 62))
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
            session.open()
            conn.context["session"] = session
        return session

    def flush(self) -> None:
        """Write out connections whose links were changed by work on other connections.

        proton queues an event on a connection's collector whenever one of its endpoints
        changes; a connection with queued events has something to process and write.
        """
        streaming.run_parked()  # large messages: bytes arrived, or proton's buffers drained
        for _ in range(8):
            busy = [
                c
                for c in self.connections.values()
                if not c.closed and c.collector.peek() is not None
            ]
            if not busy:
                return
            for conn in busy:
                conn.process()

    def start(self) -> None:
        self.loop.on_idle = self.flush
        for listener in self.config.listeners:
            if listener.http:
                continue  # served by enmesh.router.metrics
            acceptor = Acceptor(
                self.loop, listener.host, listener.port, functools.partial(self._accept, listener)
            )
            self.acceptors.append(acceptor)
            log.info("listening on %s:%s (%s)", listener.host, listener.port, listener.name)
        for state in self.connectors.values():
            self._connect(state)

    @property
    def policy_enabled(self) -> bool:
        return self.config.policy is not None and self.config.policy.enable_vhost_policy

    def _tls(self, profile_name: str | None) -> security.TlsFiles | None:
        if not profile_name:
            return None
        profile = self.config.ssl_profile(profile_name)
        return security.TlsFiles(
            _text(profile.ca_cert_file),
            _text(profile.cert_file),
            _text(profile.private_key_file),
            resolve_password(profile.password) if profile.password else None,
            protocols=profile.protocols,
            ciphers=profile.ciphers,
        )

    def _accept(self, listener: Listener, sock: socket.socket, peer: str) -> None:
        if self.admission.refusal(_listener_name(listener), peer) is not None:
            sock.close()  # before any TLS or SASL work: that is what a guesser costs us
            return
        tls = self._tls(listener.ssl_profile)
        domain = (
            security.server_domain(
                tls,
                require_peer_certificate=listener.role == INTER_ROUTER,
                require_tls=listener.require_ssl,
            )
            if tls
            else None
        )
        transport = security.server_transport(
            listener.sasl_mechanisms, listener.authenticate_peer, self.sasl, domain
        )
        _limit(transport, listener)
        info = ConnectionInfo(
            role=listener.role,
            name=_listener_name(listener),
            outgoing=False,
            multi_tenant=listener.multi_tenant,
            link_capacity=listener.link_capacity,
            strip=listener.strip_annotations,
        )
        screen = security.first_bytes_screen(listener.require_ssl)
        sasl_screen = SaslInputScreen()
        conn = ProtonSocket(
            self.loop, sock, transport, self, peer=peer, screen=screen, input_screen=sasl_screen
        )
        self._adopt(conn, info)
        timeout = listener.initial_handshake_timeout_seconds
        self.admission.start(conn, info.identity, info.name, timeout)

    def _adopt(self, conn: ProtonSocket, info: ConnectionInfo) -> None:
        info.identity = next(self._connection_ids)
        conn.context["info"] = info
        self.connections[info.identity] = conn
        conn.connection.enmesh_role = info.role  # which counters its links count into
        conn.connection.container = self.id
        conn.connection.offered_capabilities = OFFERED_CAPABILITIES
        conn.process()

    def _connect(self, state: ConnectorState) -> None:
        connector = state.config
        if self.connectors.get(connector.name) is not state:
            return  # removed or replaced by a config change since this retry was scheduled
        try:
            sock = connect_nonblocking(connector.host, connector.port)
        except OSError as exc:
            log.info("connector %s: %s; retrying", connector.name, exc.strerror)
            self._retry(state)
            return
        tls = self._tls(connector.ssl_profile)
        domain = security.client_domain(tls, connector.verify_hostname) if tls else None
        transport = security.client_transport(
            connector.host, connector.sasl_mechanisms, self.sasl, domain
        )
        _limit(transport, connector)
        connection = Connection()
        password = resolve_password(connector.sasl_password) if connector.sasl_password else None
        security.set_credentials(connection, connector.sasl_username, password)
        connection.hostname = connector.host
        conn = ProtonSocket(
            self.loop,
            sock,
            transport,
            self,
            peer=f"{connector.host}:{connector.port}",
            connecting=True,
            connection=connection,
        )
        state.socket = conn
        info = ConnectionInfo(
            role=connector.role,
            name=connector.name,
            outgoing=True,
            link_capacity=connector.link_capacity,
            strip=connector.strip_annotations,
        )
        conn.connection.open()
        self._adopt(conn, info)

    def _retry(self, state: ConnectorState) -> None:
        state.socket = None
        delay = state.backoff
        state.backoff = min(state.backoff * 2, 5.0)
        self.loop.call_later(delay, lambda: self._connect(state))

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
        if info.role == NORMAL and not info.outgoing and not self._admit_client(conn, info):
            return
        if connection.state & LOCAL_UNINIT:
            connection.open()
        if info.role == INTER_ROUTER:
            self._neighbour_up(conn, info, connection.remote_container or "")
        elif info.role == ROUTE_CONTAINER:
            state = self.connectors.get(info.name)
            if state is not None:
                state.backoff = 0.1
            self.link_routes.broker_up(conn, info.name)

    def _admit_client(self, conn: ProtonSocket, info: ConnectionInfo) -> bool:
        """Tenancy and connection limits for a client connection; closes it if refused."""
        user = conn.transport.user or "anonymous"
        info.user = user
        hostname = (conn.connection.remote_hostname or "").split(":")[0]
        if info.multi_tenant:
            info.vhost_name = hostname
        if not self.policy_enabled:
            return True
        admitted = tenancy.admit(self.vhosts, hostname, user)
        if isinstance(admitted, str):
            conn.abort(UNAUTHORIZED, admitted)
            return False
        vhost, group = admitted.vhost, admitted.group
        hostname = vhost.hostname
        if hostname == tenancy.DEFAULT_VHOST:
            info.vhost_name = ""  # the stack's own clients (its administrator): no tenant
        limit = self.config.policy.max_connections if self.config.policy else 0
        if self.vhost_connections[hostname] >= vhost.max_connections or (
            limit and sum(self.vhost_connections.values()) >= limit
        ):
            conn.abort("amqp:resource-limit-exceeded", f"connection limit of {hostname!r} reached")
            return False
        info.vhost, info.group, info.counted_vhost = vhost, group, hostname
        self.vhost_connections[hostname] += 1
        return True

    def _on_session_remote_open(self, conn: ProtonSocket, event: Event) -> None:
        if _connection(event).state & Endpoint.LOCAL_CLOSED:
            return  # refused connection: its queued begins and attaches get no answer
        if _session(event).state & LOCAL_UNINIT:
            _session(event).open()

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
            self._client_link(conn, info, link)
        elif info.role == INTER_ROUTER:
            self._mesh_link(conn, info, link)
        else:
            _refuse(link, "amqp:not-allowed", "brokers may not attach links to the router")

    def _on_link_flow(self, conn: ProtonSocket, event: Event) -> None:
        link = _link(event)
        out: OutLink | None = getattr(link, "enmesh_out", None)
        if out is not None:
            out.pump()
            self.link_routes.on_flow(link)
            self._retry_key(out.key)
            if link.drain_mode and not out.waiting:
                link.drained()  # nothing to send now: give the consumer its credit back
                self._retry_key(out.key)  # credit given back is no longer demand for stored
        elif getattr(link, "enmesh_control_sender", False):
            self._send_control(conn)
        else:
            self.link_routes.on_flow(link)

    def _on_delivery(self, conn: ProtonSocket, event: Event) -> None:
        delivery = _delivery(event)
        link = delivery.link
        if link.is_receiver:
            inbound: InLink | None = getattr(link, "enmesh_in", None)
            if inbound is not None:
                inbound.on_delivery(delivery)
            elif getattr(link, "enmesh_control", False):
                self._control_message(conn, link, delivery)
            elif self.management is not None and getattr(link, "enmesh_management", False):
                self.management.on_request(conn, link, delivery)
            return
        out: OutLink | None = getattr(link, "enmesh_out", None)
        if out is not None and delivery.updated:
            out.on_disposition(delivery)
            self._close_if_idle(out)
            self._retry_held(out.key)  # an outcome frees a balanced slot; reachability is unchanged

    def _on_link_remote_close(self, conn: ProtonSocket, event: Event) -> None:
        link = _link(event)
        closed_here_first = bool(link.state & Endpoint.LOCAL_CLOSED)
        self.forget_link(link)
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
        if _session(event).state & Endpoint.LOCAL_ACTIVE:
            _session(event).close()

    def _on_connection_remote_close(self, conn: ProtonSocket, event: Event) -> None:
        if _connection(event).state & Endpoint.LOCAL_ACTIVE:
            _connection(event).close()

    def _on_transport(self, conn: ProtonSocket, event: Event) -> None:
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
        self.admission.closed(conn, info.identity)
        self.connections.pop(info.identity, None)
        links = []
        link = conn.connection.link_head(0)
        while link is not None:
            links.append(link)
            self.forget_link(link)
            self.link_routes.on_connection_lost(link)
            link = link.next(0)
        for link in links:
            endpoints.forget_attributes(link)
        if info.counted_vhost is not None:
            self.vhost_connections[info.counted_vhost] -= 1
        if info.neighbour is not None and self.neighbours.get(info.neighbour) is conn:
            del self.neighbours[info.neighbour]
            self._neighbours_changed()
        if info.role == ROUTE_CONTAINER:
            self.link_routes.broker_down(info.name, conn)
        state = self.connectors.get(info.name) if info.outgoing else None
        if state is not None and state.socket is conn:
            self._retry(state)

    # --- client links --------------------------------------------------------------------

    def _client_link(self, conn: ProtonSocket, info: ConnectionInfo, link: Link) -> None:
        receiving = link.is_sender  # the router sends: the client receives
        if receiving and link.remote_source.dynamic:
            self._dynamic_consumer(conn, info, link)
            return
        address = (link.remote_source if receiving else link.remote_target).address
        if not address:
            if receiving:
                _refuse(link, "amqp:invalid-field", "a receiver needs a source address")
            else:
                self.relay.attach(conn, info, link)
            return
        group = info.group
        if group is not None and not (
            group.allows_source(address) if receiving else group.allows_target(address)
        ):
            verb = "receive from" if receiving else "send to"
            _refuse(link, UNAUTHORIZED, f"no permission to {verb} {address!r}")
            return
        if address == MANAGEMENT_ADDRESS and self.management is not None:
            self._management_link(conn, info, link, receiving)
            return
        if receiving and address.startswith(DYNAMIC_PREFIX):
            _refuse(link, UNAUTHORIZED, "temporary addresses are only for their creator")
            return
        if _reserved(link, address):
            return
        internal = info.internal(address)
        if self.link_routes.try_route(conn, info, link, internal, "in" if receiving else "out"):
            return
        if self.semantics(internal).distribution == UNAVAILABLE:
            _refuse(link, "amqp:not-found", "Node not found")  # qdrouterd's words
            return
        add = self._add_consumer if receiving else self._add_producer
        add(info, link, internal, address)

    def _management_link(
        self, conn: ProtonSocket, info: ConnectionInfo, link: Link, receiving: bool
    ) -> None:
        if receiving:
            self.management.attach_reply_link(conn, info, link)
        elif info.group is not None and MANAGEMENT_ADDRESS not in info.group.targets:
            _refuse(link, UNAUTHORIZED, "management needs the manage right")
        else:
            self.management.attach_request_link(conn, info, link)

    def _dynamic_consumer(self, conn: ProtonSocket, info: ConnectionInfo, link: Link) -> None:
        if info.group is not None and not info.group.allow_dynamic_source:
            _refuse(link, UNAUTHORIZED, "no permission for dynamic sources")
            return
        address = f"{DYNAMIC_PREFIX}{self.id}.{info.identity}.{secrets.token_hex(8)}"
        link.source.address = address
        self._add_consumer(info, link, info.internal(address), address)

    def listener_named(self, name: str) -> Listener | None:
        return next((x for x in self.config.listeners if _listener_name(x) == name), None)

    def semantics(self, internal: str) -> AddressSemantics:
        entry = best_match(self.config.addresses, internal)
        if entry is None:  # the router's defaultDistribution
            return AddressSemantics(self.config.router.default_distribution, False)
        return AddressSemantics(entry.distribution, entry.waypoint)

    def _state(self, key: str, semantics: AddressSemantics) -> AddressState:
        state = self.addresses.get(key)
        if state is None:
            state = self.addresses[key] = AddressState(key, semantics.distribution)
        return state

    def _add_consumer(self, info: ConnectionInfo, link: Link, internal: str, address: str) -> None:
        semantics = self.semantics(internal)
        key = semantics.key(internal, 1)
        if not link.source.address:
            link.source.address = address
        set_address(link.target, link.remote_target.address)
        link.open()
        # Multicast too: a copy goes settled or not as its producer sent it (qdrouterd 1.19).
        out = OutLink(cast(Sender, link), key, info.link_capacity)
        out.trace_as = None if strips_out(info.strip) else node_id(self.id)
        self.add_destination(out)

    def add_destination(self, out: OutLink) -> None:
        state = self.addresses.get(out.key) or self._state(out.key, self.semantics_of_key(out.key))
        tally.bind(out, state.counts, outgoing=True)
        state.consumers.append(out)
        self._key_changed(out.key)

    def semantics_of_key(self, key: str) -> AddressSemantics:
        return self.semantics(key.rsplit("@", 1)[0] if "@" in key else key)

    def _add_producer(self, info: ConnectionInfo, link: Link, internal: str, address: str) -> None:
        semantics = self.semantics(internal)
        link.target.address = address
        set_address(link.source, link.remote_source.address)
        link.open()
        receiver = cast(Receiver, link)
        inbound = InLink(receiver, semantics.key(internal, 0), info.link_capacity, self.route)
        inbound.strip_in = strips_in(info.strip)
        self.add_source(inbound)

    def add_source(self, inbound: InLink) -> None:
        state = self._state(inbound.key, self.semantics_of_key(inbound.key))
        tally.bind(inbound, state.counts, outgoing=False)
        state.producers.append(inbound)
        if state.distribution == "multicast":
            inbound.room = functools.partial(self._multicast_room, inbound)
        if demand.is_stored(self, inbound.key):
            inbound.demand = demand.demand_of(self, inbound)
            self._retry_key(inbound.key)  # a broker link here changes what transit may take
            return
        inbound.set_routable(self.routable(inbound))

    def forget_link(self, link: Link) -> None:
        out: OutLink | None = getattr(link, "enmesh_out", None)
        if out is not None and not out.closed:
            self._requeue(out.lost())
            state = self.addresses.get(out.key)
            if state is not None and out in state.consumers:
                state.consumers.remove(out)
                self._key_changed(out.key)
            for transit_key, transit in list(self.transit.items()):
                if transit is out:
                    del self.transit[transit_key]
        inbound: InLink | None = getattr(link, "enmesh_in", None)
        if inbound is not None and not inbound.closed:
            inbound.lost()
            inbound.retry()
            self._forget_if_drained(inbound)
            if inbound.demand is not None:
                self._retry_key(inbound.key)  # without this broker link, transit may feed
        for counted in (out, inbound):
            if counted is not None:
                self.retired.link_gone(counted)
                self._forget_if_transient(counted.key)

    def _forget_if_transient(self, key: str) -> None:
        """An idle address keeps its counters (stable series), unless it is a dynamic reply
        address (one per requester: they would pile up) or the router knows too many."""
        state = self.addresses.get(key)
        if state is None or not state.idle:
            return
        if _dynamic(key) or (
            len(self.addresses) > MAX_KNOWN_ADDRESSES
            and best_match(self.config.addresses, key.rsplit(WAYPOINT_PHASE_MARK, 1)[0]) is None
        ):
            self.forget_address(key)

    def address_counts(self, key: str) -> list[int]:
        """The delivery counters of `key` (enmesh.router.tally), the address now known;
        a dynamic address without local links is not kept for it."""
        state = self.addresses.get(key)
        if state is None and _dynamic(key):
            return tally.zeros()
        return self._state(key, self.semantics_of_key(key)).counts

    def forget_address(self, key: str) -> bool:
        """Forget an idle address and its counters (management, or a transient address);
        False if links still use it."""
        state = self.addresses.get(key)
        if state is None or not state.idle:
            return False
        self.retired.address_gone(state.counts)
        del self.addresses[key]
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
            self.loop.call_soon(origin.retry)

    # --- routing ---------------------------------------------------------------------------

    def routable(self, inbound: InLink) -> bool:
        return self.reachable(inbound.key, inbound.destination_router)

    def reachable(self, key: str, destination: str | None = None) -> bool:
        """Has `key` a consumer here or elsewhere (or at `destination`, if given)?"""
        if destination is not None and destination != self.id:
            ra = self.mesh.advertisements.get(destination)
            return (
                destination in self.mesh.routes.next_hop and ra is not None and key in ra.addresses
            )
        state = self.addresses.get(key)
        local = bool(state and state.consumers)
        if destination == self.id:
            return local
        return local or bool(self.mesh.routers_with(key))

    def route(self, held: Held) -> bool:
        """Forward one message, or return False to keep holding it."""
        inbound = held.origin
        if inbound is None:
            return True
        return self.route_to(held, inbound.key, inbound.destination_router)

    def route_to(self, held: Held, key: str, destination: str | None) -> bool:
        """Forward `held` for `key` (toward `destination` if given), or return False."""
        if destination is not None and destination != self.id:
            transit = self.transit_link(key, destination)
            if transit is None or transit.free <= 0:
                return False
            transit.offer(held)
            return True
        state = self.addresses.get(key)
        local = state.consumers if state is not None else []
        remote_routers = [] if destination == self.id else self.mesh.routers_with(key)
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
        else:
            remote = [self.transit_link(key, r) for _, r in remote_routers]
            chosen = choose_balanced(local + [link for link in remote if link is not None])
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
        if destination is not None and destination != self.id:
            outs = [self.transit_link(key, destination)]
        else:
            state = self.addresses.get(key)
            outs = list(state.consumers) if state is not None else []
            if destination is None:
                outs += [self.transit_link(key, r) for _, r in self.mesh.routers_with(key)]
        return min((out.capacity - len(out.waiting) for out in outs if out is not None), default=0)

    def transit_link(self, key: str, destination: str) -> OutLink | None:
        """The link carrying `key` toward `destination`, attached on first use."""
        existing = self.transit.get((key, destination))
        if existing is not None and not existing.closed:
            return existing
        hop = self.mesh.routes.next_hop.get(destination)
        conn = self.neighbours.get(hop) if hop else None
        if conn is None or conn.closed:
            return None
        sender = self.session_of(conn).sender(f"transit/{destination}/{key}")
        sender.target.address = f"{TRANSIT_PREFIX}{destination}/{key}"
        sender.open()
        out = OutLink(sender, key, conn.context["info"].link_capacity)
        out.hop = hop
        out.trace_as = node_id(self.id)  # routers always annotate for each other
        tally.bind(out, self.address_counts(key), outgoing=True)
        self.transit[(key, destination)] = out
        return out

    def _retry_key(self, key: str) -> None:
        state = self.addresses.get(key)
        if state is not None:
            for inbound in list(state.producers):
                self._update_source(inbound)
        self.relay.retry()

    def _retry_held(self, key: str) -> None:
        state = self.addresses.get(key)
        if state is not None:
            for inbound in list(state.producers):
                if inbound.held:
                    inbound.retry()
                    self._forget_if_drained(inbound)
        self.relay.retry()

    def _forget_if_drained(self, inbound: InLink) -> None:
        """A producer link that is gone stays a source until its presettled messages left."""
        state = self.addresses.get(inbound.key)
        if inbound.drained and state is not None and inbound in state.producers:
            state.producers.remove(inbound)

    def _key_changed(self, key: str) -> None:
        self._retry_key(key)
        self._schedule_advertise()

    def _refresh_all(self) -> None:
        for (key, destination), out in list(self.transit.items()):
            hop = self.mesh.routes.next_hop.get(destination)
            ra = self.mesh.advertisements.get(destination)
            old_hop = self.neighbours.get(out.hop or "")
            if hop != out.hop and (old_hop is None or old_hop.closed):
                # The path is gone: what was in flight on it can no longer settle.
                del self.transit[(key, destination)]
                self._requeue(out.lost())
                out.link.close()
            elif hop != out.hop:
                # A better path appeared; the old one still delivers what it carries.
                del self.transit[(key, destination)]
                self._retire(out)
            elif ra is None or key not in ra.addresses:
                # The destination no longer wants `key`, but outcomes of what it already
                # has are still on their way back: stop using the link, close it once idle.
                del self.transit[(key, destination)]
                self._retire(out)
        for state in list(self.addresses.values()):
            for inbound in list(state.producers):
                self._update_source(inbound)
        self.relay.retry()

    def _update_source(self, inbound: InLink) -> None:
        """Re-evaluate one source after a change: credit, and what it holds."""
        inbound.retry()
        self._forget_if_drained(inbound)
        routable = self.routable(inbound)
        inbound.set_routable(routable)
        if not routable and inbound.destination_router is not None and inbound.held:
            # Held for a destination that is gone: the upstream router can re-route them.
            inbound.release_held()

    def _retire(self, out: OutLink) -> None:
        unsent = list(out.waiting)
        out.waiting.clear()
        self._requeue(unsent)
        out.retiring = True
        self._close_if_idle(out)

    @staticmethod
    def _close_if_idle(out: OutLink) -> None:
        if out.retiring and not out.unsettled and not out.closed:
            out.closed = True
            out.link.close()

    # --- mesh ------------------------------------------------------------------------------

    def _mesh_link(self, conn: ProtonSocket, info: ConnectionInfo, link: Link) -> None:
        if self.link_routes.from_mesh(conn, info, link):
            return  # a link-routed attach on its way to (or from) a broker
        if not isinstance(link, Receiver):
            _refuse(link, "amqp:not-allowed", "routers only send to each other")
            return
        target = link.remote_target.address or ""
        link.target.address = target
        set_address(link.source, link.remote_source.address)
        if target == CONTROL_ADDRESS:
            link.enmesh_control = True
            link.open()
            link.flow(CONTROL_CREDIT)
            return
        if not target.startswith(TRANSIT_PREFIX):
            _refuse(link, "amqp:not-found", f"unknown inter-router address {target!r}")
            return
        destination, _, key = target[len(TRANSIT_PREFIX) :].partition("/")
        link.open()
        inbound = InLink(link, key, info.link_capacity, self.route, destination)
        inbound.strip_in = False  # routers never strip each other's annotations
        self.add_source(inbound)

    def _neighbour_up(self, conn: ProtonSocket, info: ConnectionInfo, neighbour: str) -> None:
        if not neighbour or neighbour == self.id:
            conn.abort("amqp:invalid-field", "inter-router peer needs a distinct container id")
            return
        old = self.neighbours.get(neighbour)
        if old is not None and old is not conn and not old.closed:
            # The peer reconnected before we noticed the old connection die: the new one
            # is the live one. (Its close no longer removes the neighbour: see on_closed.)
            log.info("new inter-router connection from %s replaces the old one", neighbour)
            old.abort("amqp:connection:forced", "replaced by a newer connection")
        info.neighbour = neighbour
        self.neighbours[neighbour] = conn
        control = self.session_of(conn).sender(f"control/{self.id}")
        control.target.address = CONTROL_ADDRESS
        control.snd_settle_mode = Link.SND_SETTLED
        control.enmesh_control_sender = True
        control.open()
        conn.context["control"] = control
        conn.context["outbox"] = list(self.mesh.advertisements.values())
        self._neighbours_changed()

    def _neighbours_changed(self) -> None:
        live = [n for n, c in self.neighbours.items() if not c.closed]
        ra = self.mesh.update_local(neighbours=live)
        if ra is not None:
            self._flood(ra, exclude=None)
        self._refresh_all()

    def advertise_soon(self) -> None:
        """What this router offers changed (e.g. a broker's link routes): tell the mesh."""
        self._schedule_advertise()

    def _schedule_advertise(self) -> None:
        if not self._advertise_scheduled:
            self._advertise_scheduled = True
            self.loop.call_soon(self._advertise)

    def _advertise(self) -> None:
        self._advertise_scheduled = False
        keys = [key for key, state in self.addresses.items() if state.consumers]
        ra = self.mesh.update_local(addresses=keys, link_routes=self.link_routes.available())
        if ra is not None:
            self._flood(ra, exclude=None)
            self._refresh_all()

    def _flood(self, ra: RouterAdvertisement, exclude: str | None) -> None:
        for neighbour, conn in self.neighbours.items():
            if neighbour != exclude and not conn.closed:
                outbox: list[RouterAdvertisement] = conn.context.setdefault("outbox", [])
                # Only the newest advertisement of a router matters: the outbox stays
                # bounded by the mesh size even while a neighbour withholds credit.
                outbox[:] = [old for old in outbox if old.router != ra.router]
                outbox.append(ra)
                self._send_control(conn)

    def _send_control(self, conn: ProtonSocket) -> None:
        control: Sender | None = conn.context.get("control")
        outbox: list[RouterAdvertisement] = conn.context.get("outbox", [])
        if control is None:
            return
        while outbox and control.credit > 0:
            ra = outbox.pop(0)
            delivery = control.delivery(str(ra.sequence))
            control.send(Message(body=ra.to_body()).encode())
            control.advance()
            delivery.settle()

    def _control_message(self, conn: ProtonSocket, link: Link, delivery: Any) -> None:
        if delivery.partial:
            return
        data = link.recv(delivery.pending)
        link.advance()
        delivery.settle()
        if link.credit < CONTROL_CREDIT // 2:
            link.flow(CONTROL_CREDIT - link.credit)
        try:
            message = Message()
            message.decode(data)
            ra = RouterAdvertisement.from_body(message.body)
        except Exception as exc:
            log.warning("bad control message from %s: %s", conn.peer, exc)
            return
        if self.mesh.accept(ra):
            info: ConnectionInfo = conn.context["info"]
            self._flood(ra, exclude=info.neighbour)
            self._refresh_all()


def _limit(transport: Transport, endpoint: Listener | Connector) -> None:
    """The listener's or connector's idleTimeoutSeconds, maxFrameSize, maxSessions."""
    transport.idle_timeout = float(endpoint.idle_timeout_seconds)  # 0: none
    transport.max_frame_size = endpoint.max_frame_size
    transport.channel_max = endpoint.max_sessions - 1


def _connection(event: Event) -> Connection:
    connection = event.connection
    assert connection is not None  # proton sets it for every connection-level event
    return connection


def _session(event: Event) -> Session:
    session = event.session
    assert session is not None
    return session


def _link(event: Event) -> Link:
    link = event.link
    assert link is not None
    return link


def _delivery(event: Event) -> Delivery:
    delivery = event.delivery
    assert delivery is not None
    return delivery


def _listener_name(listener: Listener) -> str:
    return listener.name or f"{listener.host}:{listener.port}"


def _text(path: object) -> str | None:
    return str(path) if path is not None else None


def _dynamic(key: str) -> bool:
    """A dynamic (reply) address's routing key, with or without a tenant prefix."""
    return key.rsplit("/", 1)[-1].startswith(DYNAMIC_PREFIX)


def _reserved(link: Link, address: str) -> bool:
    """Refuse addresses clients may not name: `@` marks the router's waypoint phases."""
    if WAYPOINT_PHASE_MARK in address:
        _refuse(link, "amqp:invalid-field", f"'@' is reserved in addresses: {address!r}")
        return True
    return False


def _refuse(link: Link, condition: str, description: str) -> None:
    """Attach then detach with a condition: how AMQP says no to a link."""
    link.open()
    link.condition = Condition(condition, description)
    link.close()
