"""An epoll event loop that drives proton engines over non-blocking sockets.

proton's own reactor waits with select(), which slows with every connection and fails
for descriptors >= 1024; here the `selectors` module (epoll on Linux) waits, and each
socket feeds a proton Transport directly. One thread, no locks: every callback runs on
the loop.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import selectors
import socket
import ssl
from collections.abc import Callable
from typing import Any, Protocol

from proton import (
    Collector,
    Condition,
    Connection,
    Endpoint,
    Event,
    Link,
    Session,
    Transport,
    symbol,
)

from enmesh.router import rawproton
from enmesh.router.loop import Loop, Timer, _guarded

# The loop lived here, and the router's modules import it from here too.
__all__ = ["Acceptor", "EngineHandler", "Front", "InputScreen", "Loop", "ProtonSocket", "Timer"]
__all__ += ["connect_nonblocking"]

log = logging.getLogger("enmesh.router.engine")

READ_CHUNK = 64 * 1024
CLOSE_GRACE_SECONDS = 5.0
ACCEPT_PAUSE_SECONDS = 0.25  # at the descriptor limit: how long accepting stops
ACCEPT_WARNING_INTERVAL_SECONDS = 30.0
_OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


class InputScreen(Protocol):
    """Sees every chunk a peer sends before proton does, until it is `done`."""

    done: bool

    def feed(self, data: bytes) -> str | None: ...


class Front(Protocol):
    """Speaks for proton until `done` (the SASL relay): `take` returns what proton sees."""

    done: bool

    def take(self, data: bytes) -> bytes: ...


class EngineHandler(Protocol):
    """What a ProtonSocket reports to: every proton event, then its end.

    A handler may also have `on_raw_delivery(source, delivery)`: then delivery events come
    to it, as proton's `pn_delivery_t` pointer (enmesh.router.rawproton), not to on_event.
    And `on_raw_transport(source, event)`, `on_raw_link_flow(source, event)`: then those
    events (proton has output: two or more per message; a peer's credit) come to it as the
    `pn_event_t` pointer, without a wrapper (`Event.wrap(event)` makes one when needed).
    """

    def on_event(self, source: ProtonSocket, event: Event) -> None: ...
    def on_closed(self, source: ProtonSocket) -> None: ...


class ProtonSocket:
    """One AMQP connection: a socket, its proton Transport/Connection and their events."""

    # Loop.work: its I/O counts as work only when it dispatches events or closes (process,
    # _finish); bytes that bring no event (a heartbeat) change no other connection.
    reports_own_work = True

    def __init__(
        self,
        loop: Loop,
        sock: socket.socket,
        transport: Transport,
        handler: EngineHandler,
        *,
        peer: str,
        connecting: bool = False,
        connection: Connection | None = None,
        screen: Callable[[bytes], str | None] | None = None,
        input_screen: InputScreen | None = None,
        front: Front | None = None,
        tls: Any = None,  # a pytls.TlsTerminator: TLS in Python, in front of `front`
    ) -> None:
        self.loop = loop
        # Sees the first bytes before proton does; a reason it returns drops the socket.
        self.screen = screen
        self.input_screen = input_screen  # the same for every chunk, while it wants them
        self.front = front
        self.tls = tls
        self._raw_out = b""  # what `front` writes, ahead of anything proton writes
        self._drop_when_written = False
        self.sock = sock
        self.transport = transport
        # Each wake-up's transport calls go to proton's C functions (rawproton).
        self._transport_impl = transport._impl
        self.handler = handler
        # A handler may take delivery, transport and credit events as proton's pointers.
        self._on_raw_delivery = getattr(handler, "on_raw_delivery", None)
        self._on_raw_transport = getattr(handler, "on_raw_transport", None)
        self._on_raw_link_flow = getattr(handler, "on_raw_link_flow", None)
        self.peer = peer
        # SASL credentials are copied from the connection when the transport binds, so a
        # client connection arrives here with its user and password already set.
        self.connection = connection or Connection()
        self.collector = Collector()
        self._collector_impl = self.collector._impl
        self.connection.collect(self.collector)
        self.context: dict[str, Any] = {}
        self.closed = False
        self._doomed = False
        self._connecting = connecting
        self._tick: Timer | None = None
        self.bytes_in = 0
        self.bytes_out = 0
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        transport.bind(self.connection)
        # What the loop watches for, so a wake-up that changes nothing asks the selector nothing.
        self._interest = selectors.EVENT_READ | selectors.EVENT_WRITE
        loop.register(sock, self, self._interest)

    def has_events(self) -> bool:
        """Whether proton queued events on this connection. The router asks every
        connection after each wake-up (Router.flush), so this skips the Event wrapper
        Collector.peek builds: with 10,000 idle connections that wrapper was most of the
        router's CPU."""
        return bool(rawproton.collector_peek(self._collector_impl) != rawproton.NULL)

    # --- I/O -------------------------------------------------------------------------

    def on_readable(self) -> None:
        if self.closed:
            return
        capacity = rawproton.transport_capacity(self._transport_impl)
        if capacity < 0:  # tail closed (or failed): proton wants no more input
            self._update_interest()
            return
        try:
            data = self.sock.recv(min(max(capacity, 1), READ_CHUNK))
        except BlockingIOError:
            return
        except OSError as exc:
            self._fail(f"read failed: {exc.strerror}")
            return
        if data and self.screen is not None:
            refusal, self.screen = self.screen(data), None
            if refusal:
                self._fail(refusal)
                return
        if data and self.input_screen is not None:
            refusal = self.input_screen.feed(data)
            if self.input_screen.done:
                self.input_screen = None
            if refusal:
                self._fail(refusal)
                return
        if data and self.tls is not None:
            try:
                data = self.tls.unwrap(data)
            except ssl.SSLError as exc:  # a failed handshake, a bad record: this peer only
                self._raw_out += self.tls.take_output()  # the alert, if any
                self._flush()
                self._fail(f"TLS: {exc.reason or exc}")
                return
            self._raw_out += self.tls.take_output()  # the handshake's answers
            if self.tls.closed:
                data = b""  # close_notify: as the end of the stream
            elif not data:
                self._flush()
                self._update_interest()
                return
        if data and self.front is not None:
            self.bytes_in += len(data)
            data = self.front.take(data)
            if self.front.done:
                self.front = None
            if not data:
                self._flush()
                self._update_interest()
                return
            self.bytes_in -= len(data)
        if data:
            self.bytes_in += len(data)
            self._push(data)
        else:
            self.transport.close_tail()
        self.process()

    def _push(self, data: bytes) -> None:
        if not rawproton.transport_push(self._transport_impl, data):
            log.debug("push to %s failed: proton took less than it was given", self.peer)
            self.transport.close_tail()

    def send_raw(self, data: bytes) -> None:
        """Write bytes proton did not produce (the SASL relay's frames to the client)."""
        if self.tls is not None:
            self.tls.wrap(data)
            data = self.tls.take_output()
        self._raw_out += data
        self._flush()
        self._update_interest()

    def deliver(self, data: bytes) -> None:
        """Hand proton bytes the front held back, then carry on as if they just came."""
        self._push(data)
        self.process()

    def drop_when_written(self, reason: str) -> None:
        """End the connection once what `send_raw` queued has been written."""
        log.info("connection %s: %s", self.peer, reason)
        self._drop_when_written = True
        self._flush()
        self._update_interest()

    def on_writable(self) -> None:
        if self.closed:
            return
        if self._connecting:
            error = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if error:
                self._fail(f"connect failed: {errno.errorcode.get(error, error)}")
                return
            self._connecting = False
        self._flush()
        self._update_interest()

    def _flush(self) -> None:
        head_closed = False
        transport = self._transport_impl
        if self.tls is not None:  # proton's output goes out through Python's TLS
            pending = rawproton.transport_pending(transport)
            if pending > 0:
                self.tls.wrap(bytes(rawproton.transport_output(transport, pending)))
                rawproton.transport_pop(transport, pending)
            head_closed = pending < 0
            self._raw_out += self.tls.take_output()
        while self._raw_out:
            sent = self._send(self._raw_out)
            if sent is None:
                return
            self._raw_out = self._raw_out[sent:]
        if self._drop_when_written:
            self.drop()
            return
        if self.tls is not None:
            if head_closed:
                self._finish()
            return
        while True:
            pending = rawproton.transport_pending(transport)
            if pending < 0:  # head closed: everything has been written
                self._finish()
                return
            if pending == 0:
                return
            sent = self._send(rawproton.transport_output(transport, pending))
            if sent is None:
                return
            rawproton.transport_pop(transport, sent)
            if sent < pending:
                return

    def _send(self, data: bytes | Any) -> int | None:
        """Bytes the socket took; None: it takes no more now (or failed, and is closed)."""
        try:
            sent = self.sock.send(data)
        except BlockingIOError:
            return None
        except OSError as exc:
            self._fail(f"write failed: {exc.strerror}")
            return None
        self.bytes_out += sent
        return sent

    def _update_interest(self) -> None:
        if self.closed:
            return
        events = 0
        transport = self._transport_impl
        if rawproton.transport_capacity(transport) > 0:
            events |= selectors.EVENT_READ
        if self._connecting or self._raw_out or rawproton.transport_pending(transport) != 0:
            events |= selectors.EVENT_WRITE
        if events == 0:
            if self.transport.closed:
                self._finish()
                return
            events = selectors.EVENT_READ  # keep watching for the peer closing
        if events != self._interest:
            self._interest = events
            self.loop.modify(self.sock, self, events)

    # --- proton events -----------------------------------------------------------------

    def process(self) -> None:
        """Dispatch queued proton events, write what they produced, rearm the tick."""
        if self.closed:
            return
        collector, on_raw_delivery = self._collector_impl, self._on_raw_delivery
        on_raw_transport, on_raw_link_flow = self._on_raw_transport, self._on_raw_link_flow
        while (raw := rawproton.collector_peek(collector)) != rawproton.NULL:
            # The per-message events go to the handler as proton's pointers when it takes
            # them: the per-message path then builds no Event, no wrappers (rawproton).
            kind = rawproton.event_type(raw)
            if on_raw_delivery is not None and kind == rawproton.PN_DELIVERY:
                self.loop.work += 1
                self._dispatch(on_raw_delivery, rawproton.event_delivery(raw), "PN_DELIVERY")
            elif on_raw_transport is not None and kind == rawproton.PN_TRANSPORT:
                self._dispatch(on_raw_transport, raw, "PN_TRANSPORT")  # a heartbeat's: no work
            elif on_raw_link_flow is not None and kind == rawproton.PN_LINK_FLOW:
                self.loop.work += 1
                self._dispatch(on_raw_link_flow, raw, "PN_LINK_FLOW")
            else:
                event = Event.wrap(raw)  # type: ignore[no-untyped-call]
                self.loop.work += event.type != Event.TRANSPORT  # a heartbeat's is not work
                self._dispatch(self.handler.on_event, event, event.type)
            rawproton.collector_pop(collector)
        if not self._connecting:
            self._flush()
        self._schedule_tick()
        self._update_interest()

    def _dispatch(
        self, handle: Callable[[ProtonSocket, Any], None], what: Any, kind: object
    ) -> None:
        try:
            handle(self, what)
        except UnicodeDecodeError:
            # proton decodes the peer's strings lazily: invalid UTF-8 in a field we
            # read is bad input, not a router fault. One line, no traceback.
            self.bad_input(f"invalid UTF-8 in a string field ({kind})")
        except Exception:
            log.exception("handler failed on %s from %s; closing it", kind, self.peer)
            self.abort("amqp:internal-error", "router error")

    def _schedule_tick(self) -> None:
        if self.closed:
            return
        deadline = rawproton.transport_tick(self._transport_impl, self.loop.now())
        tick = self._tick
        if tick is not None and (not deadline or tick.deadline <= deadline):
            # Armed for that moment or before: it arms the next deadline when it fires. A
            # peer's every frame moves its idle deadline on; no heap entry per wake-up.
            return
        if tick is not None:
            tick.cancel()
            self._tick = None
        if deadline:
            self._tick = self.loop.call_at(deadline, self._on_tick, quiet=True)

    def _on_tick(self) -> None:
        self._tick = None
        self.process()
        if self.transport.condition is not None and not self.closed and not self._doomed:
            # Idle timeout (or another transport error): proton wants to send its close,
            # but a dead peer never reads it. Give the close a moment, then drop the socket.
            self._doomed = True
            self.loop.call_later(CLOSE_GRACE_SECONDS, lambda: self._fail("peer unresponsive"))

    # --- ending ------------------------------------------------------------------------

    def abort(self, condition: str, description: str) -> None:
        """Close the connection with an error condition, then drop the socket."""
        if self.closed:
            return
        # Called from event handlers: the close is written when processing resumes.
        # An open we never sent goes out flagged as a failed establishment (AMQP 2.7.1).
        if self.connection.state & Endpoint.LOCAL_UNINIT:
            self.connection.properties = {symbol("amqp:connection-establishment-failed"): True}
            self.connection.open()
        self.connection.condition = Condition(condition, description)
        self.connection.close()

    def bad_input(self, description: str, condition: str = "amqp:decode-error") -> None:
        """Close for something the peer sent that we refuse: logged once per connection."""
        if not self.context.get("bad_input"):
            self.context["bad_input"] = True
            log.info("connection %s: %s; closing it (%s)", self.peer, description, condition)
            self.abort(condition, description)

    def _fail(self, reason: str) -> None:
        if self.closed:
            return
        log.info("connection %s: %s", self.peer, reason)
        self.drop()

    def drop_after_bug(self) -> None:
        """The loop caught an exception in this socket's handling: end it (enmesh.router.loop)."""
        self.drop()

    def drop(self) -> None:
        """Close the socket now, without a word to the peer (e.g. one that never spoke)."""
        if self.closed:
            return
        self.transport.close_tail()
        self.transport.close_head()
        self._finish()

    def _finish(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._tick is not None:
            self._tick.cancel()
        self.loop.unregister(self.sock)
        with contextlib.suppress(OSError):
            self.sock.close()
        # Let the handler see the remaining events (link closures) before the end.
        self.transport.unbind()
        self.loop.work += 1  # the handler forgets the connection, and may touch others
        _guarded(lambda: self.handler.on_closed(self))


class Acceptor:
    """A listening socket; hands each accepted socket to `on_accept`."""

    def __init__(
        self,
        loop: Loop,
        host: str,
        port: int,
        on_accept: Callable[[socket.socket, str], None],
        backlog: int = 1024,
    ) -> None:
        self.loop = loop
        self.on_accept = on_accept
        self.sock = socket.create_server((host, port), backlog=backlog, reuse_port=False)
        self.sock.setblocking(False)
        self.address = self.sock.getsockname()
        self.pauses = 0  # times accepting stopped for want of descriptors or memory
        self._next_warning = 0.0
        loop.register(self.sock, self, selectors.EVENT_READ)

    def on_readable(self) -> None:
        for _ in range(64):  # accept in bursts, but let other sockets run
            try:
                conn, address = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in _OUT_OF_RESOURCES:
                    self._pause(exc)
                else:
                    log.warning("accept on %s failed: %s", self.address, exc.strerror)
                return
            self.on_accept(conn, f"{address[0]}:{address[1]}")

    def _pause(self, exc: OSError) -> None:
        """Out of descriptors: the waiting connection stays readable, so stop watching the
        socket for a moment instead of spinning on accept, and say so once an interval."""
        self.pauses += 1
        self.loop.unregister(self.sock)
        self.loop.call_later(ACCEPT_PAUSE_SECONDS, self._resume)
        if self.loop.now() >= self._next_warning:
            self._next_warning = self.loop.now() + ACCEPT_WARNING_INTERVAL_SECONDS
            log.warning(
                "accept on %s failed: %s; pausing accepts for %.1f s at a time (logged at"
                " most every %.0f s; %d pauses so far)",
                self.address,
                exc.strerror,
                ACCEPT_PAUSE_SECONDS,
                ACCEPT_WARNING_INTERVAL_SECONDS,
                self.pauses,
            )

    def _resume(self) -> None:
        if self.sock.fileno() >= 0:
            self.loop.register(self.sock, self, selectors.EVENT_READ)

    def on_writable(self) -> None:  # pragma: no cover - never registered for write
        pass

    def close(self) -> None:
        self.loop.unregister(self.sock)
        self.sock.close()


def connect_nonblocking(host: str, port: int) -> socket.socket:
    """Start a TCP connect without waiting; completion shows up as writability."""
    info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(info[0], info[1], info[2])
    sock.setblocking(False)
    error = sock.connect_ex(info[4])
    if error not in (0, errno.EINPROGRESS):
        sock.close()
        raise OSError(error, errno.errorcode.get(error, str(error)))
    return sock


# proton types an event's endpoints as optional; these are for events that always have one.


def event_connection(event: Event) -> Connection:
    connection = event.connection
    assert connection is not None  # proton sets it for every connection-level event
    return connection


def event_session(event: Event) -> Session:
    session = event.session
    assert session is not None
    return session


def event_link(event: Event) -> Link:
    link = event.link
    assert link is not None
    return link
