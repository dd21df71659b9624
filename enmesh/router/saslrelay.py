"""qdrouterd's authServicePlugin: a client's SASL exchange relayed to an auth service.

As qpid-dispatch's src/remote_sasl.c does: when a client starts SASL on a listener whose
`saslPlugin` names an authServicePlugin, the router connects to that service, offers the
client the service's mechanisms (less those the listener's saslMechanisms leave out),
passes sasl-init / challenges / responses through, and on the service's outcome:
refused -> the client gets that outcome; accepted -> the router opens an AMQP connection
to the service with desired capability ADDRESS-AUTHZ, reads `authenticated-identity`
(its `sub`) and `address-authz` (address -> ["send"] / ["recv"]) from the service's open
properties, closes it, and only then tells the client it is authenticated. The identity
and the permissions then stand for the client's connection (enmesh.router.connecting).

proton's Python binding runs SASL only through Cyrus, so the relay reads and writes the
SASL frames itself, in front of a proton transport that has no SASL layer (it sees the
client's AMQP header once SASL is over). That is why such a listener speaks plain AMQP:
with TLS, proton would decrypt, and the SASL frames would never pass here.
"""

from __future__ import annotations

import errno
import logging
import selectors
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from proton import Array, symbol, ubyte

from enmesh.auth import frames
from enmesh.auth.frames import Frame, FrameError, FrameReader
from enmesh.router.config_model import AuthServicePlugin
from enmesh.router.engine import Loop, connect_nonblocking

log = logging.getLogger("enmesh.router.auth")
READ_CHUNK = 16 * 1024
PRODUCT = {symbol("product"): "enmesh-router"}


@dataclass(frozen=True)
class Authenticated:
    identity: str
    authz: dict[str, tuple[str, ...]] | None  # None: the service sent no address-authz


class ServiceLink:
    """The router's connection to the auth service: raw frames over a non-blocking
    socket (TLS through Python's ssl when the plugin has an sslProfile)."""

    def __init__(
        self,
        loop: Loop,
        address: tuple[str, int],
        tls: ssl.SSLContext | None,
        on_item: Callable[[bytes | Frame], None],
        on_lost: Callable[[str], None],
    ) -> None:
        self.loop, self.on_item, self.on_lost = loop, on_item, on_lost
        self.reader = FrameReader()
        self._out = b""
        self._connecting = True
        self._handshaking = tls is not None
        self.closed = False
        self._tls, self._hostname = tls, address[0]
        # TLS wraps the socket once TCP is connected: Python's ssl cannot wrap a
        # non-blocking socket whose connect is still in progress (BlockingIOError).
        self.sock: socket.socket = connect_nonblocking(*address)
        loop.register(self.sock, self, selectors.EVENT_READ | selectors.EVENT_WRITE)

    def send(self, data: bytes) -> None:
        self._out += data
        self.on_writable()

    def on_writable(self) -> None:
        if self.closed:
            return
        try:
            if self._connecting:
                error = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if error:
                    raise OSError(error, errno.errorcode.get(error, str(error)))
                self._connecting = False
                if self._tls is not None:
                    self.loop.unregister(self.sock)
                    self.sock = self._tls.wrap_socket(
                        self.sock, server_hostname=self._hostname, do_handshake_on_connect=False
                    )
                    self.loop.register(self.sock, self, selectors.EVENT_READ)
            if self._handshaking:
                self.sock.do_handshake()  # type: ignore[attr-defined]
                self._handshaking = False
            while self._out:
                self._out = self._out[self.sock.send(self._out) :]
        except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            pass
        except OSError as exc:
            self._lose(f"auth service: {exc.strerror or exc}")
            return
        self._interest()

    def on_readable(self) -> None:
        if self.closed:
            return
        if self._connecting or self._handshaking:
            self.on_writable()
            return
        try:
            data = self.sock.recv(READ_CHUNK)
        except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return
        except OSError as exc:
            self._lose(f"auth service: {exc.strerror or exc}")
            return
        if not data:
            self._lose("auth service closed the connection")
            return
        try:
            items = self.reader.feed(data)
        except FrameError as exc:
            self._lose(f"auth service: {exc}")
            return
        for item in items:
            if not self.closed:
                self.on_item(item)

    def _interest(self) -> None:
        if self.closed:
            return
        events = selectors.EVENT_READ
        if self._out or self._connecting or self._handshaking:
            events |= selectors.EVENT_WRITE
        self.loop.modify(self.sock, self, events)

    def _lose(self, reason: str) -> None:
        self.close()
        self.on_lost(reason)

    def drop_after_bug(self) -> None:
        """The loop caught an exception in this link's handling: the client is refused."""
        self._lose("the authentication service link failed")

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.loop.unregister(self.sock)
            self.sock.close()


class SaslRelay:
    """In front of one client connection's proton transport until SASL is over.

    `take` gets every chunk the client sends and returns what proton should see (nothing
    while SASL runs). `send` writes to the client; `deliver` hands proton the bytes that
    arrived while the service was still deciding; `fail` drops the client once what was
    sent to it is written.
    """

    def __init__(
        self,
        loop: Loop,
        plugin: AuthServicePlugin,
        tls: ssl.SSLContext | None,
        mechanisms: tuple[str, ...],
        authenticate_peer: bool,
    ) -> None:
        self.loop, self.plugin, self.tls = loop, plugin, tls
        self.mechanisms, self.authenticate_peer = mechanisms, authenticate_peer
        # Set by the connection this relay stands in front of (enmesh.router.connecting).
        self.send: Callable[[bytes], None] = _ignore
        self.deliver: Callable[[bytes], None] = _ignore
        self.fail: Callable[[str], None] = _ignore
        self.done = False
        self.result: Authenticated | None = None
        self._client = FrameReader()
        self._started = False
        self._service: ServiceLink | None = None
        self._mechanisms_sent = False
        self._offered: frozenset[str] = frozenset()  # what the client may choose from
        self._accepted = False  # the service said OK; waiting for its open
        self._additional: object = None  # the service's outcome's additional-data
        self._held = b""  # client bytes after SASL, before we have answered it

    # --- the client's side ------------------------------------------------------------

    def take(self, data: bytes) -> bytes:
        if self.done:
            return data
        if self._accepted or self.result is not None:
            self._held += data
            return b""
        try:
            items = self._client.feed(data)
        except FrameError as exc:
            self._end_client(f"bad SASL frame: {exc}")
            return b""
        for item in items:
            passthrough = self._from_client(item)
            if passthrough is not None:
                return passthrough
        return b""

    def _from_client(self, item: bytes | Frame) -> bytes | None:
        if not self._started:
            self._started = True
            if item == frames.SASL_HEADER:
                self._connect()
                return None
            if item == frames.AMQP_HEADER and not self.authenticate_peer:
                self.done = True  # no SASL, and none required: proton takes it all
                return bytes(item) + self._client.rest()
            self._end_client("client did not start SASL, which this listener requires")
            return None
        if isinstance(item, Frame) and item.kind == frames.SASL_FRAME and self._service:
            if item.code == frames.SASL_INIT:
                mechanism, response = item.field(0), item.field(1)
                if str(mechanism) not in self._offered:  # the listener's saslMechanisms
                    self._outcome(frames.AUTH)
                    self._end_client(f"SASL mechanism {str(mechanism)!r} was not offered")
                    return None
                fields = [mechanism, response, self.plugin.realm]
                self._service.send(frames.encode(frames.SASL_FRAME, frames.SASL_INIT, fields))
                return None
            if item.code == frames.SASL_RESPONSE:
                fields = [item.field(0)]
                self._service.send(frames.encode(frames.SASL_FRAME, frames.SASL_RESPONSE, fields))
                return None
        self._end_client(f"unexpected in the SASL exchange: {item!r}"[:200])
        return None

    def abandon(self) -> None:
        """The client's connection has ended: the service has no one left to answer."""
        self.done = True
        if self._service is not None:
            self._service.close()

    def _end_client(self, reason: str) -> None:
        if self._service is not None:
            self._service.close()
        self.fail(reason)

    def _outcome(self, code: int, additional: object = None) -> None:
        fields: list[object] = [ubyte(code)] + ([additional] if additional is not None else [])
        self.send(frames.encode(frames.SASL_FRAME, frames.SASL_OUTCOME, fields))

    # --- the service's side -----------------------------------------------------------

    def _connect(self) -> None:
        try:
            self._service = ServiceLink(
                self.loop, self.plugin.address(), self.tls, self._from_service, self._lost
            )
        except OSError as exc:
            reason = f"auth service: {exc.strerror or exc}"
            self.loop.call_soon(lambda: self._lost(reason))
            return
        self._service.send(frames.SASL_HEADER)

    def _from_service(self, item: bytes | Frame) -> None:
        link = self._service
        assert link is not None
        if isinstance(item, bytes):
            return  # the service's SASL, then AMQP, protocol header
        if item.code == frames.SASL_MECHANISMS:
            offered = _symbols(item.field(0))
            if self.mechanisms:
                offered = [m for m in offered if m in self.mechanisms]
            self._offer(offered)
        elif item.code == frames.SASL_CHALLENGE:
            self.send(frames.encode(frames.SASL_FRAME, frames.SASL_CHALLENGE, [item.field(0)]))
        elif item.code == frames.SASL_OUTCOME:
            code = int(item.field(0, frames.SYS))
            if code != frames.OK:
                link.close()
                self._outcome(code)
                self.fail("authentication refused by the auth service")
                return
            self._accepted = True
            self._additional = item.field(1)  # SCRAM's server-final, for the client
            desired = frames.symbols("ADDRESS-AUTHZ")
            open_fields: list[Any] = ["enmesh-router", self.plugin.address()[0], None, None, None]
            open_fields += [None, None, None, desired, PRODUCT]
            link.send(
                frames.AMQP_HEADER + frames.encode(frames.AMQP_FRAME, frames.OPEN, open_fields)
            )
        elif item.code == frames.OPEN and self._accepted:
            self.result = _authenticated(item.field(9) or {})
            link.send(frames.encode(frames.AMQP_FRAME, frames.CLOSE, []))
            link.close()
            log.info("authenticated as %s", self.result.identity)
            self._outcome(frames.OK, self._additional)
            self.done = True
            held, self._held = self._client.rest() + self._held, b""
            if held:
                self.deliver(held)
        else:
            self._lost(f"auth service sent an unexpected frame 0x{item.code:02x}")

    def _lost(self, reason: str) -> None:
        """The service went away or misbehaved before deciding: refuse, and say why."""
        if self.done or self.result is not None:
            return
        if self._service is not None:
            self._service.close()
        log.warning("%s; refusing the client's authentication", reason)
        if not self._mechanisms_sent:  # the client waits for our side of SASL to begin
            self._offer(list(self.mechanisms or ("PLAIN",)))
        self._outcome(frames.SYS_TEMP)
        self.fail(reason)

    def _offer(self, mechanisms: list[str]) -> None:
        self._offered = frozenset(mechanisms)
        array = frames.symbols(*mechanisms)
        self._mechanisms_sent = True
        self.send(frames.SASL_HEADER + _mechanisms(array))


def _ignore(_: object) -> None:
    pass


def _mechanisms(array: Array) -> bytes:
    return frames.encode(frames.SASL_FRAME, frames.SASL_MECHANISMS, [array])


def _symbols(value: object) -> list[str]:
    if isinstance(value, Array):
        return [str(v) for v in value.elements]
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    return [str(value)] if value else []


def _authenticated(properties: object) -> Authenticated:
    props = properties if isinstance(properties, dict) else {}
    identity = props.get(symbol("authenticated-identity"), props.get("authenticated-identity"))
    sub = identity.get("sub", "") if isinstance(identity, dict) else str(identity or "")
    raw = props.get(symbol("address-authz"), props.get("address-authz"))
    if not isinstance(raw, dict):
        return Authenticated(str(sub), None)
    authz = {
        str(address): tuple(p for p in _symbols(perms) if p in ("send", "recv"))
        for address, perms in raw.items()
    }
    return Authenticated(str(sub), authz)
