"""Byte layers between a device's socket and its MQTT session: TLS and WebSocket.

Both are sans I/O, so the one epoll loop drives them: TLS with the standard library's
`ssl.SSLObject` over memory BIOs, WebSocket with `wsproto` (the python-hyper project's
sans-IO implementation of RFC 6455; the `mqtt` subprotocol of MQTT 3.1.1 section 6).
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    RejectConnection,
    Request,
    TextMessage,
)
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

if TYPE_CHECKING:
    from enmesh.mqtt.gateway import Settings

Down = Callable[[bytes], None]
Fail = Callable[[str], None]


class Layer:
    """Turns wire bytes from below into bytes for above, and back."""

    def attach(self, down: Down, fail: Fail) -> None:
        self.down, self.fail = down, fail

    def receive(self, data: bytes) -> bytes:
        return data

    def send(self, data: bytes) -> bytes:
        return data

    def closing(self) -> bytes:
        return b""


class TlsLayer(Layer):
    def __init__(self, context: ssl.SSLContext) -> None:
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = context.wrap_bio(self.incoming, self.outgoing, server_side=True)
        self.handshaken = False

    def receive(self, data: bytes) -> bytes:
        self.incoming.write(data)
        plain = bytearray()
        try:
            if not self.handshaken:
                self.tls.do_handshake()
                self.handshaken = True
            while True:
                chunk = self.tls.read(65536)
                if not chunk:
                    break
                plain += chunk
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            pass
        except ssl.SSLError as exc:
            self._flush()
            self.fail(f"TLS: {exc.reason or exc}")
            return b""
        self._flush()
        return bytes(plain)

    def send(self, data: bytes) -> bytes:
        if data:
            self.tls.write(data)
        return self.outgoing.read()

    def closing(self) -> bytes:
        if self.handshaken:
            with contextlib.suppress(ssl.SSLError):  # close_notify is all we want out
                self.tls.unwrap()
        return self.outgoing.read()

    def _flush(self) -> None:
        pending = self.outgoing.read()
        if pending:
            self.down(pending)


class WebSocketLayer(Layer):
    """MQTT over WebSocket: binary messages carry the MQTT byte stream."""

    def __init__(self) -> None:
        self.ws = WSConnection(ConnectionType.SERVER)
        self.open = False

    def receive(self, data: bytes) -> bytes:
        try:
            self.ws.receive_data(data)
            out = bytearray()
            for event in self.ws.events():
                out += self._event(event)
            return bytes(out)
        except (RemoteProtocolError, LocalProtocolError) as exc:
            self.fail(f"WebSocket: {exc}")
            return b""

    def _event(self, event: Any) -> bytes:
        if isinstance(event, Request):
            if "mqtt" not in event.subprotocols:
                self.down(self.ws.send(RejectConnection(status_code=400)))
                self.fail("WebSocket request without the 'mqtt' subprotocol")
                return b""
            self.down(self.ws.send(AcceptConnection(subprotocol="mqtt")))
            self.open = True
        elif isinstance(event, BytesMessage):
            return bytes(event.data)
        elif isinstance(event, TextMessage):  # MQTT-6.0.0-1: binary frames only
            self.fail("WebSocket text frame: MQTT travels in binary frames")
        elif isinstance(event, Ping):
            self.down(self.ws.send(event.response()))
        elif isinstance(event, CloseConnection):
            self.down(self.ws.send(event.response()))
            self.fail("WebSocket closed by the client")
        return b""

    def send(self, data: bytes) -> bytes:
        if not self.open or not data:
            return b""
        return self.ws.send(BytesMessage(data=data))

    def closing(self) -> bytes:
        if not self.open:
            return b""
        self.open = False
        try:
            return self.ws.send(CloseConnection(code=1000))
        except LocalProtocolError:
            return b""


def server_context(settings: Settings) -> ssl.SSLContext:
    if settings.tls_cert is None or settings.tls_key is None:
        raise ValueError("a TLS listener (mqtts, wss) needs --tls-cert and --tls-key")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(settings.tls_cert), str(settings.tls_key))
    return context


def layer_factory(kind: str, settings: Settings) -> Callable[[], list[Layer]]:
    """The layers for one listener kind: mqtt, mqtts, ws, wss."""
    if kind not in ("mqtt", "mqtts", "ws", "wss"):
        raise ValueError(f"listener kind {kind!r}: expected mqtt, mqtts, ws or wss")
    context = server_context(settings) if kind in ("mqtts", "wss") else None

    def make() -> list[Layer]:
        layers: list[Layer] = []
        if context is not None:
            layers.append(TlsLayer(context))
        if kind.startswith("ws"):
            layers.append(WebSocketLayer())
        return layers

    return make
