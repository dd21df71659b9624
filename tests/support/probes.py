"""Odd and hostile clients for router tests and benchmarks.

- `login_from`: a real proton client (Connection/Transport over a socket bound to a
  chosen source address: Linux routes all of 127/8 to lo), so a test can be two clients
  from two addresses. proton's Container cannot bind a source address.
- Hand-built AMQP frames (`anonymous_session` and its parts): what no proton client
  sends, such as strings that are not UTF-8, after a SASL ANONYMOUS login.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import ssl
import struct
import time
from pathlib import Path
from typing import Any

from proton import Connection, Event, Transport

from enmesh.router.engine import Loop, ProtonSocket

SASL_HEADER = b"AMQP\x03\x01\x00\x00"
AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
NULL, TRUE = b"\x40", b"\x41"

# A space that lets anyone in (SASL ANONYMOUS), so hand-built frames reach open and attach.
ANONYMOUS_MODEL = """\
apiVersion: enmesh.io/v1
kind: AddressPlan
metadata: {name: anycast}
spec: {addressType: anycast}
---
apiVersion: enmesh.io/v1
kind: AddressSpacePlan
metadata: {name: open-plan}
spec:
  addressSpaceType: standard
  resourceLimits: {connections: 5000, addresses: 5}
  addressPlans: [anycast]
---
apiVersion: enmesh.io/v1
kind: AddressSpace
metadata: {name: public}
spec: {type: standard, plan: open-plan, authentication: {allowAnonymous: true}}
---
apiVersion: enmesh.io/v1
kind: Address
metadata: {name: public.news}
spec: {addressSpace: public, address: news, type: anycast, plan: anycast}
---
apiVersion: enmesh.io/v1
kind: MessagingUser
metadata: {name: public.editor}
spec:
  addressSpace: public
  username: editor
  authentication: {passwordSecret: {name: public-editor, key: password}}
  authorization: [{operations: [send, recv], addresses: [news]}]
"""


# --- a proton client from a chosen source address ---------------------------------------


class _Outcome:
    def __init__(self) -> None:
        self.result: str | None = None

    def on_event(self, source: ProtonSocket, event: Event) -> None:
        if self.result is not None:
            return
        if event.type == Event.CONNECTION_REMOTE_OPEN:
            self.result = "open"
        elif event.type == Event.TRANSPORT_ERROR:
            condition = source.transport.condition
            self.result = condition.name if condition is not None else "transport error"

    def on_closed(self, source: ProtonSocket) -> None:
        if self.result is None:  # a SASL outcome shows as the transport's condition
            condition = source.transport.condition
            self.result = condition.name if condition is not None else "closed"


def login_from(
    source: str, port: int, user: str, password: str, *, vhost: str, timeout: float = 10.0
) -> str:
    """Log in with SCRAM-SHA-256 from `source`: "open", an error condition or "closed"."""
    loop = Loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((source, 0))
    sock.setblocking(False)
    sock.connect_ex(("127.0.0.1", port))
    transport = Transport(Transport.CLIENT)
    transport.sasl().allowed_mechs("SCRAM-SHA-256")
    connection = Connection()
    connection.user, connection.password, connection.hostname = user, password, vhost
    connection.container = f"probe-{source}"
    outcome = _Outcome()
    conn = ProtonSocket(
        loop, sock, transport, outcome, peer=f"{source}->{port}", connecting=True,
        connection=connection,
    )  # fmt: skip
    connection.open()
    conn.process()
    try:
        loop.run_until(lambda: outcome.result is not None, timeout)
    finally:
        conn.drop()
        loop.selector.close()
    return outcome.result or "no answer"


# --- hand-built frames ------------------------------------------------------------------


def string(raw: bytes) -> bytes:
    """An AMQP str8-utf8 holding `raw` as is, valid UTF-8 or not."""
    return b"\xa1" + bytes([len(raw)]) + raw


def symbol(text: str) -> bytes:
    return b"\xa3" + bytes([len(text)]) + text.encode()


def uint(value: int) -> bytes:
    return b"\x70" + struct.pack(">I", value)


def described(code: int, fields: list[bytes]) -> bytes:
    body = b"".join(fields)
    return (
        b"\x00\x53"
        + bytes([code])
        + b"\xd0"
        + struct.pack(">II", len(body) + 4, len(fields))
        + body
    )


def frame(body: bytes, sasl: bool = False, channel: int = 0) -> bytes:
    return struct.pack(">IBBH", 8 + len(body), 2, 1 if sasl else 0, channel) + body


def anonymous_login() -> bytes:
    return SASL_HEADER + frame(described(0x41, [symbol("ANONYMOUS")]), sasl=True)


def open_frame(container: bytes, hostname: bytes) -> bytes:
    return frame(described(0x10, [string(container), string(hostname)]))


def begin_frame() -> bytes:
    return frame(described(0x11, [NULL, uint(0), uint(100), uint(100)]))


def attach_frame(name: bytes, address: bytes) -> bytes:
    terminus = [string(address)]
    source, target = described(0x28, terminus), described(0x29, terminus)
    return frame(described(0x12, [string(name), uint(0), TRUE, NULL, NULL, source, target]))


def anonymous_session(
    *, container: bytes = b"probe", hostname: bytes = b"public", link: bytes | None = None
) -> bytes:
    """SASL ANONYMOUS, then open, and if `link` is given begin and attach (to `news`)."""
    data = anonymous_login() + AMQP_HEADER + open_frame(container, hostname)
    if link is not None:
        data += begin_frame() + attach_frame(link, b"news")
    return data


def exchange(port: int, data: bytes, timeout: float = 10.0, source: str = "127.0.0.1") -> bytes:
    """Send `data`, then read until the router closes the connection (or `timeout`)."""
    received = b""
    with socket.create_connection(
        ("127.0.0.1", port), timeout=timeout, source_address=(source, 0)
    ) as sock:
        sock.sendall(data)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except (TimeoutError, ConnectionResetError):
                break
            if not chunk:
                break
            received += chunk
    return received


def exchange_tls(port: int, ca: Path, data: bytes, timeout: float = 10.0) -> bytes:
    """`exchange` inside TLS (the server's certificate checked against `ca`)."""
    context = ssl.create_default_context(cafile=str(ca))
    context.check_hostname = False
    received = b""
    with (
        socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw,
        context.wrap_socket(raw) as sock,
    ):
        sock.sendall(data)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except (TimeoutError, ConnectionResetError, ssl.SSLError):
                break
            if not chunk:
                break
            received += chunk
    return received


def hold_silent(port: int, count: int, source: str = "127.0.0.1") -> list[socket.socket]:
    """`count` connections that never send a byte."""
    sockets = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
        sock.setblocking(False)
        sockets.append(sock)
    return sockets


def count_closed(sockets: list[socket.socket], timeout: float) -> int:
    """Wait until the peer has closed every socket (or `timeout`); how many it closed."""
    selector = selectors.DefaultSelector()
    for sock in sockets:
        selector.register(sock, selectors.EVENT_READ)
    closed = 0
    deadline = time.monotonic() + timeout
    while selector.get_map() and time.monotonic() < deadline:
        for key, _ in selector.select(timeout=0.2):
            peer: Any = key.fileobj
            try:
                if peer.recv(4096):
                    continue
            except BlockingIOError:
                continue
            except OSError:
                pass
            closed += 1
            selector.unregister(peer)
    selector.close()
    return closed


def close_all(sockets: list[socket.socket]) -> None:
    for sock in sockets:
        with contextlib.suppress(OSError):
            sock.close()
