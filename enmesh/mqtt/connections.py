"""The gateway's AMQP connections to the mesh: one per user, shared by its devices.

Every CONNECT logs in to the mesh with the device's own user and password, over a
connection of its own, so the router's SASL database answers each time: a changed
password or a removed user counts at the next CONNECT. When the login succeeds and the
user already has a connection from this gateway, the login connection is closed again
and the device gets an AMQP session on the user's connection; otherwise the login
connection becomes the user's. The router's policy decides per link, by user and
address space, so it decides the same for every device of the user, whichever
connection carries it. What a device costs the gateway and the router is then its
session and links, not a connection, a transport and a socket.

What sharing changes: the plan's connection limit counts the gateway's connections (one
per user with devices here, for as long as a login takes), not devices. A gateway run
with `--connection-per-device` keeps one connection per device (the key then names the
device), as the router's per-connection view of devices needs.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from proton import SASL, Connection, Endpoint, Event, SSLDomain

from enmesh.mqtt import packets
from enmesh.mqtt.mesh import ESTABLISHMENT_FAILED, REFUSALS, RouterEndpoint, describe
from enmesh.router import rawproton, security
from enmesh.router.engine import Loop, ProtonSocket, connect_nonblocking
from enmesh.router.engine import event_connection as _connection
from enmesh.router.engine import event_link as _link
from enmesh.router.engine import event_session as _session

if TYPE_CHECKING:
    from enmesh.mqtt.mesh import MeshClient

log = logging.getLogger("enmesh.mqtt.connections")

# Devices on one connection at most: a lost connection loses no more than these at once,
# and the router, which serves a connection's frames in turn, keeps serving the others.
DEVICES_PER_CONNECTION = 1000
Key = tuple[str, str, str]  # (space, user, "" when shared; else the device's own)


class MeshConnections:
    """Where the gateway's devices reach the mesh: the users' shared connections."""

    def __init__(self, loop: Loop, endpoint: RouterEndpoint, *, per_device: bool = False) -> None:
        self.loop, self.endpoint, self.per_device = loop, endpoint, per_device
        self.shared: dict[Key, list[MeshConnection]] = {}

    def login(self, client: MeshClient, user: str, password: str, space: str) -> None:
        """Check `user`'s password with the mesh; the client then joins a connection."""
        # Per device: a key no other device has, not even a later one with its client id.
        key = (space, user, client.prefix if self.per_device else "")
        container = client.name if self.per_device else f"mqtt/{space}/{user}"
        MeshConnection(self, key, client).open(user, password, container)

    def logged_in(self, login: MeshConnection, client: MeshClient) -> None:
        """The mesh accepted `client`'s login over `login`: it joins its user's connection
        (`login` itself when the user has none with room)."""
        if client.ended:  # the device left while its login was on its way
            login.close()
            return
        home = next((c for c in self.shared.get(login.key, []) if c.has_room()), None)
        if home is None:
            home = login
            self.shared.setdefault(login.key, []).append(login)
        else:
            login.close()  # it has done its work: the password is checked
        home.join(client)

    def forget(self, connection: MeshConnection) -> None:
        carriers = self.shared.get(connection.key, [])
        if connection in carriers:
            carriers.remove(connection)
            if not carriers:
                del self.shared[connection.key]


class MeshConnection:
    """One AMQP connection to the mesh, opened with a user's credentials; each device of
    that user on it is an AMQP session (MeshClient). The EngineHandler of its socket."""

    def __init__(self, pool: MeshConnections, key: Key, login: MeshClient) -> None:
        self.pool, self.key = pool, key
        self.login: MeshClient | None = login  # the device whose login this checks
        self.clients: set[MeshClient] = set()
        self.ending = 0  # sessions of departed devices the router has not ended yet
        self.socket: ProtonSocket | None = None
        self.opened = False
        self.closing = False
        self.ended = False
        self.capacity = DEVICES_PER_CONNECTION
        self.dispatching = False  # inside the socket's process(): it writes when done
        self._process_due = False

    def open(self, user: str, password: str, container: str) -> None:
        space, endpoint = self.key[0], self.pool.endpoint
        try:
            sock = connect_nonblocking(endpoint.host, endpoint.port)
        except OSError as exc:
            self._refuse_login(packets.SERVER_UNAVAILABLE, f"cannot reach the mesh: {exc.strerror}")
            return
        domain = None
        if endpoint.tls:
            domain = SSLDomain(SSLDomain.MODE_CLIENT)
            if endpoint.ca:
                domain.set_trusted_ca_db(endpoint.ca)
            domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME)
        mechanisms = ("SCRAM-SHA-256", "PLAIN") if endpoint.tls else ("SCRAM-SHA-256",)
        transport = security.client_transport(space, mechanisms, endpoint.sasl, domain)
        connection = Connection()
        security.set_credentials(connection, user, password)
        connection.hostname = space  # the address space: the router's vhost
        connection.container = container
        self.socket = ProtonSocket(
            self.pool.loop,
            sock,
            transport,
            self,
            peer=f"{endpoint.host}:{endpoint.port}",
            connecting=True,
            connection=connection,
        )
        connection.open()
        self.socket.process()

    def has_room(self) -> bool:
        # A departed device's session holds its channel until the router ends it too.
        used = len(self.clients) + self.ending
        return self.opened and not self.closing and used < self.capacity

    def join(self, client: MeshClient) -> None:
        assert self.socket is not None
        session = self.socket.connection.session()
        session.mqtt_client = client.ref  # in proton's record: events find their device
        session.open()
        self.clients.add(client)
        client.joined(self, session)
        self.process_soon()

    def leave(self, client: MeshClient) -> None:
        """The device is gone: its session ends; the last one out closes the connection."""
        self.clients.discard(client)
        session = client.session
        if session is not None and session.state & Endpoint.LOCAL_ACTIVE:
            session.close()
            self.ending += 1
        if not self.clients and self.login is None:
            self.close()
        self.process_soon()

    def close(self) -> None:
        if self.closing or self.ended or self.socket is None:
            return
        self.closing = True
        self.pool.forget(self)
        self.socket.connection.close()
        self.process_soon()

    # --- writing -------------------------------------------------------------------------

    def process_soon(self) -> None:
        """Write what the calls since the last write produced, once per loop round: the
        round's publishes, settlements and credit of every device on this connection
        leave in one write, not one each. From inside an event nothing is due: the
        socket's own process() is running and writes when the handler returns (calling
        it would dispatch the event twice)."""
        if self.socket is not None and not self.dispatching and not self._process_due:
            self._process_due = True
            self.pool.loop.call_soon(self._process_now)

    def _process_now(self) -> None:
        self._process_due = False
        if self.socket is not None:
            self.socket.process()

    # --- proton events (EngineHandler) ---------------------------------------------------

    def on_event(self, source: ProtonSocket, event: Event) -> None:
        handler = getattr(self, f"_{event.type.method}", None)
        if handler is not None:
            self._dispatch(handler, event)

    def on_raw_transport(self, source: ProtonSocket, event: Any) -> None:
        """PN_TRANSPORT (proton has output), as its pointer: nothing to do, and taking it
        raw spares a wrapper per event (ProtonSocket.process)."""

    def on_raw_link_flow(self, source: ProtonSocket, event: Any) -> None:
        """The mesh's credit, as proton's pointer: the device of the link sends."""
        link = rawproton.event_link(event)
        if rawproton.link_is_receiver(link):
            return  # the credit of subscriptions is ours
        attrs = rawproton.link_attrs(link)
        if attrs is None or (client := _device(attrs)) is None:
            return
        self._for_device(client, client.on_flow, attrs)

    def on_raw_delivery(self, source: ProtonSocket, raw: Any) -> None:
        """A delivery event as proton's pointer: per message no Event and no wrappers,
        and the link's attribute record read once (its device, its address)."""
        link = rawproton.delivery_link(raw)
        attrs = rawproton.link_attrs(link)
        if attrs is None or (client := _device(attrs)) is None:
            return
        if rawproton.link_is_receiver(link):
            self._for_device(client, client.received, link, raw, attrs)
        else:
            self._for_device(client, client.updated, raw)

    def on_closed(self, source: ProtonSocket) -> None:
        self._transport_ended()

    def _dispatch(self, handle: Any, what: Any) -> None:
        self.dispatching = True
        try:
            handle(what)
        finally:
            self.dispatching = False

    def _for_device(self, client: MeshClient, handle: Any, *what: Any) -> None:
        """One device's part of an event. If it fails, that device ends, not every device
        of its user: the socket would end the whole connection (ProtonSocket._dispatch).
        Called inside a wrapped event's _dispatch too: the flag is restored, not cleared."""
        was_dispatching, self.dispatching = self.dispatching, True
        try:
            handle(*what)
        except Exception:
            log.exception("device %s failed on an event from the mesh; it is ended", client.name)
            self.clients.discard(client)
            client.lost("gateway error")
            self.leave(client)
        finally:
            self.dispatching = was_dispatching

    def _on_connection_remote_open(self, event: Event) -> None:
        connection = _connection(event)
        if (connection.remote_properties or {}).get(ESTABLISHMENT_FAILED):
            return  # the close with its condition follows
        self.opened = True
        assert self.socket is not None
        # Each device is a session: no more of them than the router takes (channel-max).
        self.capacity = min(DEVICES_PER_CONNECTION, self.socket.transport.remote_channel_max + 1)
        login, self.login = self.login, None
        if login is not None:
            self.pool.logged_in(self, login)

    def _on_connection_remote_close(self, event: Event) -> None:
        condition = _connection(event).remote_condition
        text = describe(condition, "the router closed the connection")
        if not self.opened:
            name = condition.name if condition is not None else ""
            self._refuse_login(REFUSALS.get(name, packets.SERVER_UNAVAILABLE), text)
        else:
            self._lose_all(text)
        if _connection(event).state & Endpoint.LOCAL_ACTIVE:
            _connection(event).close()

    def _on_transport_error(self, event: Event) -> None:
        self._transport_ended()

    def _on_session_remote_close(self, event: Event) -> None:
        session = _session(event)
        client = _device(session)
        if session.state & Endpoint.LOCAL_ACTIVE:  # the router ended a device's session
            text = describe(session.remote_condition, "the mesh ended the device's session")
            if client is not None:
                self.clients.discard(client)
                client.lost(text)
            session.close()
        else:
            self.ending -= 1
        # Ended both ways: proton may let it go (with its links); a shared connection
        # lives on, and would otherwise keep every departed device's session.
        session.mqtt_client = None
        session.free()
        if not self.clients and self.login is None and self.opened:
            self.close()

    def _on_link_remote_open(self, event: Event) -> None:
        link = _link(event)
        client = _device(link)
        if client is not None:
            self._for_device(client, client.on_link_open, link)

    def _on_link_remote_close(self, event: Event) -> None:
        link = _link(event)
        client = _device(link)
        if client is not None:
            self._for_device(client, client.on_link_close, link)
        if link.state & Endpoint.LOCAL_ACTIVE:
            link.close()

    def _transport_ended(self) -> None:
        """The socket or transport ended: before the open, say why the mesh refused."""
        if self.ended:
            return
        assert self.socket is not None
        transport = self.socket.transport
        text = describe(transport.condition, "connection to the mesh failed")
        if self.opened:
            self._lose_all(text)
        elif transport.sasl().outcome == SASL.AUTH:
            text = "authentication failed: wrong user name or password"
            self._refuse_login(packets.BAD_CREDENTIALS, text)
        else:
            self._refuse_login(packets.SERVER_UNAVAILABLE, text)
        self.ended = True
        self.pool.forget(self)

    def _refuse_login(self, reason: int, text: str) -> None:
        login, self.login = self.login, None
        self.ended = True
        if login is not None:
            login.refused(reason, text)

    def _lose_all(self, text: str) -> None:
        self.ended = True
        self.pool.forget(self)
        clients, self.clients = self.clients, set()
        for client in clients:
            client.lost(text)


def _device(holder: Any) -> MeshClient | None:
    """The device a proton session or link belongs to, while it lives: `holder` is its
    wrapper, or a link's attribute record from rawproton (None: no wrapper saw it)."""
    if holder is None or isinstance(holder, dict):
        ref = (holder or {}).get("mqtt_client")
    else:
        ref = getattr(holder, "mqtt_client", None)
    device: MeshClient | None = ref() if ref is not None else None
    return device
