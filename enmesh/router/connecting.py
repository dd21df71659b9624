"""Connections: accepting on listeners, dialling connectors (retried with backoff), and
admitting a client's open (tenancy and connection limits).

What the router knows about each connection is a `ConnectionInfo`, kept in the
ProtonSocket's context; the proton events it then produces are the Router's.
"""

from __future__ import annotations

import logging
import socket
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from proton import Connection, Transport

from enmesh.router import failover, pytls, security, tenancy
from enmesh.router.config import Connector, Listener, resolve_password
from enmesh.router.config_model import StripAnnotations
from enmesh.router.engine import ProtonSocket, connect_nonblocking
from enmesh.router.policy import Vhost, VhostGroup
from enmesh.router.relay import CAPABILITY as RELAY_CAPABILITY
from enmesh.router.saslrelay import Authenticated, SaslRelay
from enmesh.router.saslscreen import SaslInputScreen

if TYPE_CHECKING:
    from enmesh.router.router import Router

log = logging.getLogger("enmesh.router")

OFFERED_CAPABILITIES = [RELAY_CAPABILITY]  # as qdrouterd's open frame
UNAUTHORIZED = "amqp:unauthorized-access"
NORMAL, INTER_ROUTER, ROUTE_CONTAINER = "normal", "inter-router", "route-container"


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
    session_frames: int = 0  # maxSessionFrames: every session's incoming window
    authenticated: Authenticated | None = None  # what an authServicePlugin's service said
    will_links: int = 0  # `$lwt` links attached (enmesh.router.wills)
    idle_timeout_seconds: float = 0.0  # the listener's or connector's (0: none)

    def internal(self, address: str) -> str:
        return f"{self.vhost_name}/{address}" if self.multi_tenant and self.vhost_name else address


FIRST_BACKOFF_SECONDS = 0.1
LAST_BACKOFF_SECONDS = 5.0
STAYED_OPEN_SECONDS = LAST_BACKOFF_SECONDS  # a connection that lasted longer worked


@dataclass
class ConnectorState:
    config: Connector
    socket: ProtonSocket | None = None
    backoff: float = FIRST_BACKOFF_SECONDS


class Connecting:
    """Opens the router's connections, and admits (or refuses) the ones clients open."""

    def __init__(self, router: Router) -> None:
        self.router = router
        self._connection_ids = iter(range(1, 1 << 62))

    def _tls(self, profile_name: str | None) -> security.TlsFiles | None:
        if not profile_name:
            return None
        profile = self.router.config.ssl_profile(profile_name)
        return security.TlsFiles(
            _text(profile.ca_cert_file),
            _text(profile.cert_file),
            _text(profile.private_key_file),
            resolve_password(profile.password) if profile.password else None,
            protocols=profile.protocols,
            ciphers=profile.ciphers,
        )

    def accept(self, listener: Listener, sock: socket.socket, peer: str) -> None:
        if self.router.admission.refusal(listener_name(listener), peer) is not None:
            sock.close()  # before any TLS or SASL work: that is what a guesser costs us
            return
        tls = self._tls(listener.ssl_profile)
        relay = self._relay(listener)
        terminator, domain = None, None
        if relay is not None and tls is not None:  # TLS in Python, so the relay sees SASL
            terminator = pytls.TlsTerminator(pytls.server_context(tls))
        elif tls is not None:
            domain = security.server_domain(
                tls,
                require_peer_certificate=listener.role == INTER_ROUTER,
                require_tls=listener.require_ssl,
            )
        transport = (
            security.relayed_transport()
            if relay is not None
            else security.server_transport(
                listener.sasl_mechanisms, listener.authenticate_peer, self.router.sasl, domain
            )
        )
        _limit(transport, listener, self.router.config.router.hello_max_age_seconds)
        info = ConnectionInfo(
            idle_timeout_seconds=float(listener.idle_timeout_seconds),
            role=listener.role,
            name=listener_name(listener),
            outgoing=False,
            multi_tenant=listener.multi_tenant,
            link_capacity=listener.link_capacity,
            strip=listener.strip_annotations,
            session_frames=listener.max_session_frames,
        )
        screen = security.first_bytes_screen(listener.require_ssl or terminator is not None)
        sasl_screen = SaslInputScreen()
        conn = ProtonSocket(
            self.router.loop,
            sock,
            transport,
            self.router,
            peer=peer,
            screen=screen,
            input_screen=None if relay else sasl_screen,
            front=relay,
            tls=terminator,
        )
        if relay is not None:
            relay.send, relay.deliver = conn.send_raw, conn.deliver
            relay.fail = conn.drop_when_written
            conn.context["sasl_relay"] = relay
        if listener.failover_servers:
            conn.connection.properties = failover.open_properties(listener.failover_servers)
        self._adopt(conn, info)
        timeout = listener.initial_handshake_timeout_seconds
        self.router.admission.start(conn, info.identity, info.name, timeout)

    def _relay(self, listener: Listener) -> SaslRelay | None:
        """The SASL relay for a listener whose saslPlugin names an authServicePlugin."""
        if not listener.sasl_plugin:
            return None
        plugin = self.router.config.auth_service_plugin(listener.sasl_plugin)
        tls = self._tls(plugin.ssl_profile)
        return SaslRelay(
            self.router.loop,
            plugin,
            security.client_context(tls) if tls else None,
            listener.sasl_mechanisms,
            listener.authenticate_peer,
        )

    def _adopt(self, conn: ProtonSocket, info: ConnectionInfo) -> None:
        info.identity = next(self._connection_ids)
        conn.context["info"] = info
        self.router.connections[info.identity] = conn
        conn.connection.enmesh_role = info.role  # which counters its links count into
        conn.connection.container = self.router.id
        conn.connection.offered_capabilities = OFFERED_CAPABILITIES
        conn.process()

    def connect(self, state: ConnectorState) -> None:
        connector = state.config
        if self.router.connectors.get(connector.name) is not state:
            return  # removed or replaced by a config change since this retry was scheduled
        try:
            sock = connect_nonblocking(connector.host, connector.port)
        except OSError as exc:
            log.info("connector %s: %s; retrying", connector.name, exc.strerror)
            self.retry(state)
            return
        tls = self._tls(connector.ssl_profile)
        domain = security.client_domain(tls, connector.verify_hostname) if tls else None
        transport = security.client_transport(
            connector.host, connector.sasl_mechanisms, self.router.sasl, domain
        )
        _limit(transport, connector, self.router.config.router.hello_max_age_seconds)
        connection = Connection()
        password = resolve_password(connector.sasl_password) if connector.sasl_password else None
        security.set_credentials(connection, connector.sasl_username, password)
        connection.hostname = connector.host
        conn = ProtonSocket(
            self.router.loop,
            sock,
            transport,
            self.router,
            peer=f"{connector.host}:{connector.port}",
            connecting=True,
            connection=connection,
        )
        state.socket = conn
        info = ConnectionInfo(
            idle_timeout_seconds=float(connector.idle_timeout_seconds),
            role=connector.role,
            name=connector.name,
            outgoing=True,
            link_capacity=connector.link_capacity,
            strip=connector.strip_annotations,
            session_frames=connector.max_session_frames,
        )
        conn.connection.open()
        self._adopt(conn, info)

    def retry(self, state: ConnectorState, opened_at: float | None = None) -> None:
        """Dial again after the backoff, which doubles on each failure up to its last. Only a
        connection that stayed open a while resets it: a peer that answers the open and
        closes at once (RabbitMQ with the connection's vhost down) is a failure too."""
        state.socket = None
        if opened_at is not None and time.monotonic() - opened_at >= STAYED_OPEN_SECONDS:
            state.backoff = FIRST_BACKOFF_SECONDS
        delay = state.backoff
        state.backoff = min(state.backoff * 2, LAST_BACKOFF_SECONDS)
        self.router.loop.call_later(delay, lambda: self.connect(state))

    def admit_client(self, conn: ProtonSocket, info: ConnectionInfo) -> bool:
        """Tenancy and connection limits for a client connection; closes it if refused."""
        relay: SaslRelay | None = conn.context.get("sasl_relay")
        authenticated = relay.result if relay is not None else None
        user = authenticated.identity if authenticated else conn.transport.user or "anonymous"
        info.user, info.authenticated = user, authenticated
        hostname = (conn.connection.remote_hostname or "").split(":")[0]
        if info.multi_tenant:
            info.vhost_name = hostname
        if not self.router.policy_enabled:
            if authenticated is not None and authenticated.authz is not None:
                info.group = tenancy.authz_group(authenticated.authz)
            return True
        admitted = tenancy.admit(self.router.vhosts, hostname, user, authenticated)
        if isinstance(admitted, str):
            conn.abort(UNAUTHORIZED, admitted)
            return False
        vhost, group = admitted.vhost, admitted.group
        hostname = vhost.hostname
        if hostname == tenancy.DEFAULT_VHOST:
            info.vhost_name = ""  # the stack's own clients (its administrator): no tenant
        limit = self.router.config.policy.max_connections if self.router.config.policy else 0
        if self.router.vhost_connections[hostname] >= vhost.max_connections or (
            limit and sum(self.router.vhost_connections.values()) >= limit
        ):
            conn.abort("amqp:resource-limit-exceeded", f"connection limit of {hostname!r} reached")
            return False
        info.vhost, info.group, info.counted_vhost = vhost, group, hostname
        self.router.vhost_connections[hostname] += 1
        return True


def _limit(transport: Transport, endpoint: Listener | Connector, hello_max_age: int) -> None:
    """The listener's or connector's idleTimeoutSeconds, maxFrameSize, maxSessions.

    An inter-router connection advertises `hello_max_age` (qdrouterd's HELLO max age) if
    shorter, so that the neighbour sends a frame at least every half of it and its
    silence is noticed in seconds (enmesh.router.liveness); the endpoint's own timeout is
    what closes it (`keep_open_through_silence`).
    """
    idle = endpoint.idle_timeout_seconds  # 0: none
    if endpoint.role == INTER_ROUTER and hello_max_age and (not idle or hello_max_age < idle):
        idle = hello_max_age
    transport.idle_timeout = float(idle)
    transport.max_frame_size = endpoint.max_frame_size
    transport.channel_max = endpoint.max_sessions - 1


def listener_name(listener: Listener) -> str:
    return listener.name or f"{listener.host}:{listener.port}"


def _text(path: object) -> str | None:
    return str(path) if path is not None else None
