"""The gateway: MQTT listeners (TCP, TLS, WebSocket) on the router's epoll loop.

Each accepted socket gets a `Session` (MQTT) and, once it sends CONNECT, a `MeshClient`
(AMQP, the device's own identity: a session on its user's connection). TLS and WebSocket
are layers between the socket and the session (`enmesh.mqtt.layers`), so one session
code serves all three listeners.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from enmesh.mqtt.connections import MeshConnections
from enmesh.mqtt.layers import Layer, layer_factory
from enmesh.mqtt.mesh import RouterEndpoint
from enmesh.mqtt.persistence import persists, resumes
from enmesh.mqtt.retained import RetainedStore
from enmesh.mqtt.session import Session
from enmesh.mqtt.topics import AddressIndex
from enmesh.mqtt.wills import WillService
from enmesh.router.engine import READ_CHUNK, Acceptor, Loop

log = logging.getLogger("enmesh.mqtt.gateway")
ADDRESS_CHECK_SECONDS = 2.0  # how often the address index file is looked at


@dataclass(frozen=True)
class Listen:
    """One listener: `kind` is mqtt, mqtts, ws or wss."""

    kind: str
    host: str
    port: int


@dataclass(frozen=True)
class Settings:
    router: RouterEndpoint
    listeners: tuple[Listen, ...]
    state_dir: Path
    max_packet_size: int = 256 * 1024
    connect_timeout: float = 10.0  # a socket that sends no CONNECT in time is dropped
    tls_cert: Path | None = None
    tls_key: Path | None = None
    # space -> (identity, password): publishes wills left over from a previous run
    will_accounts: dict[str, tuple[str, str]] = field(default_factory=dict)
    addresses: Path | None = None  # the compiled address index: wildcard subscriptions
    # 3.1.1 persistent sessions, and 5.0's "never": how long a parked one is kept
    max_session_expiry: float = 86400.0
    # one AMQP connection per device, not per user (enmesh.mqtt.connections)
    connection_per_device: bool = False


class Gateway:
    def __init__(self, settings: Settings, loop: Loop | None = None) -> None:
        self.settings = settings
        self.loop = loop or Loop()
        self.connections = MeshConnections(
            self.loop, settings.router, per_device=settings.connection_per_device
        )
        self.sessions: dict[tuple[str, str], Session] = {}  # (space, client id) -> session
        self.sessions_open = 0
        self.refusals = 0
        self.protocol_errors = 0
        self.acceptors: list[Acceptor] = []
        self.wills = WillService(self)
        self.retained = RetainedStore(settings.state_dir)
        self.addresses = AddressIndex(settings.addresses)
        self.ports: dict[str, int] = {}

    def start(self) -> None:
        for listen in self.settings.listeners:
            acceptor = Acceptor(
                self.loop,
                listen.host,
                listen.port,
                self._acceptor(layer_factory(listen.kind, self.settings)),
            )
            self.acceptors.append(acceptor)
            self.ports[listen.kind] = acceptor.address[1]
            log.info("listening for %s on %s:%d", listen.kind, listen.host, acceptor.address[1])
        self.wills.recover()
        if self.addresses.enabled:
            self.loop.call_later(ADDRESS_CHECK_SECONDS, self._check_addresses)

    def _check_addresses(self) -> None:
        """A changed model (enmesh apply) reaches the wildcard subscriptions it matches."""
        if self.addresses.refresh():
            log.info("address index %s changed: following it", self.addresses.path)
            for session in list(self.sessions.values()):
                session.follow_filters()
        self.loop.call_later(ADDRESS_CHECK_SECONDS, self._check_addresses)

    def _acceptor(
        self, make_layers: Callable[[], list[Layer]]
    ) -> Callable[[socket.socket, str], None]:
        def accept(sock: socket.socket, peer: str) -> None:
            SocketConnection(self, sock, peer, make_layers())

        return accept

    def take_over(self, session: Session) -> Session | None:
        """MQTT-3.1.4-2: a second connection with the same client id ends the first. With
        clean start 0 the session the client id has (connected or parked) carries on over
        the new connection: it is returned (enmesh.mqtt.persistence)."""
        assert session.connect is not None
        key = (session.identity.rsplit("@", 1)[1], session.connect.client_id)
        previous = self.sessions.get(key)
        self.wills.cancel_delayed(key)
        if previous is session:
            return None
        if (
            previous is not None
            and resumes(session.connect)
            and previous.connect is not None
            and persists(previous.connect)  # MQTT-3.1.2-6: a clean session's state is not kept
            and previous.identity == session.identity
            and previous.mesh is not None
            and not previous.mesh.ended
        ):
            return previous
        self.sessions[key] = session
        if previous is not None:
            previous.taken_over()
        return None

    def forget(self, session: Session) -> None:
        if session.connect is None or not session.identity:
            return
        key = (session.identity.rsplit("@", 1)[1], session.connect.client_id)
        if self.sessions.get(key) is session:
            del self.sessions[key]

    def stop(self) -> None:
        for acceptor in self.acceptors:
            acceptor.close()
        self.wills.close()
        self.retained.close()


class SocketConnection:
    """A device's socket: bytes through the layers (TLS, WebSocket) to its session, and
    the session's output back, with a bounded write backlog (see session.WRITE_BACKLOG)."""

    def __init__(
        self, gateway: Gateway, sock: socket.socket, peer: str, layers: list[Layer]
    ) -> None:
        self.gateway, self.sock, self.layers = gateway, sock, layers
        self.out = bytearray()  # what the socket did not take yet
        self.batch = bytearray()  # what the session wrote in this loop round
        self.closing = False
        self.closed = False
        self.reading = True
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.session = Session(gateway, self, peer)
        for index, layer in enumerate(layers):
            layer.attach(self._down_from(index), self._layer_failed)
        gateway.loop.register(sock, self, selectors.EVENT_READ)

    def _down_from(self, index: int) -> Callable[[bytes], None]:
        """Writes bytes of layer `index` through the layers below it to the socket."""

        def down(data: bytes) -> None:
            for layer in reversed(self.layers[:index]):
                data = layer.send(data)
            self._wire_write(data)

        return down

    # Transport (what the session sees)
    def write(self, data: bytes) -> None:
        """Queue a packet; the round's packets go down the layers and out in one write at
        the end of the loop round (a read of 100 PUBLISHes answers with one send of 100
        PUBACKs, not 100 sends). MQTT lets a WebSocket frame carry several packets."""
        if self.closed:
            return
        if not self.batch:
            self.gateway.loop.call_soon(self._write_batch)
        self.batch += data

    def _write_batch(self) -> None:
        if self.batch and not self.closed:
            data, self.batch = bytes(self.batch), bytearray()
            self._down_from(len(self.layers))(data)

    def backlog(self) -> int:
        """Bytes the socket has not taken (the round's batch is not yet offered to it)."""
        return len(self.out)

    def hand_to(self, session: Session) -> None:
        """A resumed session carries on over this connection (persistence.py)."""
        self.session = session

    def pause(self, paused: bool) -> None:
        """Stop (or restart) reading the device: its socket buffers fill, TCP slows it."""
        self.reading = not paused
        self._watch()

    def _watch(self) -> None:
        """Register the socket for what we wait on now (nothing while paused and idle)."""
        if self.closed:
            return
        events = selectors.EVENT_READ if self.reading else 0
        if self.out:
            events |= selectors.EVENT_WRITE
        if events:
            self.gateway.loop.modify(self.sock, self, events)
        else:
            self.gateway.loop.unregister(self.sock)

    def drop_after_bug(self) -> None:
        """The loop caught an exception in this device's handling: close its socket now
        (its session counts it as lost: a will is published)."""
        self._finish()

    def close(self) -> None:
        """Flush what the session wrote (a CONNACK or DISCONNECT), then close."""
        if self.closed:
            return
        self.closing = True
        self._write_batch()
        for index in reversed(range(len(self.layers))):
            self._down_from(index)(self.layers[index].closing())
        if not self.out:
            self._finish()

    def _wire_write(self, data: bytes) -> None:
        if not data or self.closed:
            return
        if not self.out:
            try:
                sent = self.sock.send(data)
            except BlockingIOError:
                sent = 0
            except OSError:
                self._finish()
                return
            data = data[sent:]
        if data:
            self.out += data
            self._watch()

    def on_readable(self) -> None:
        try:
            data = self.sock.recv(READ_CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._finish()
            return
        if self.closing:
            return  # the session has ended: what else arrives is not read
        for layer in self.layers:
            data = layer.receive(data)
            if not data:
                return
        self.session.feed(data)

    def on_writable(self) -> None:
        if self.out:
            try:
                sent = self.sock.send(self.out)
            except BlockingIOError:
                return
            except OSError:
                self._finish()
                return
            del self.out[:sent]
        if not self.out:
            if self.closing:
                self._finish()
                return
            self._watch()
            if self._serves_session():
                self.session.drained()

    def _layer_failed(self, why: str) -> None:
        log.info("connection %s: %s", self.session.peer, why)
        self.out.clear()
        self.batch.clear()
        self._finish()

    def _finish(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.gateway.loop.unregister(self.sock)
        with contextlib.suppress(OSError):
            self.sock.close()
        if self._serves_session():
            self.session.transport_lost()

    def _serves_session(self) -> bool:
        """False once its session went on without it (parked, then resumed elsewhere)."""
        return self.session.transport is self
