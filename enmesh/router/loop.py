"""The router's event loop: sockets (epoll through `selectors`), timers, callbacks.

One thread, no locks: every callback runs on the loop. enmesh.router.engine drives proton
over the sockets it watches (and re-exports these names).
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import selectors
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

log = logging.getLogger("enmesh.router.engine")
Callback = Callable[[], None]


@dataclass(order=True)
class Timer:
    deadline: float
    sequence: int
    callback: Callback = field(compare=False)
    cancelled: bool = field(default=False, compare=False)
    quiet: bool = field(default=False, compare=False)  # reports its own work (Loop.work)

    def cancel(self) -> None:
        # The heap keeps a cancelled timer until its deadline: drop what the callback
        # holds (a closed connection's whole engine) now rather than then.
        self.cancelled = True
        self.callback = _nothing


def _nothing() -> None:
    pass


class Readable(Protocol):
    def on_readable(self) -> None: ...
    def on_writable(self) -> None: ...


QUIET = "reports_own_work"  # a handler with this true attribute counts its own work


class Loop:
    """Sockets, timers and a stop flag."""

    def __init__(self) -> None:
        self.selector = selectors.DefaultSelector()
        self._timers: list[Timer] = []
        self._sequence = itertools.count()
        self._running = False
        self._after_io: list[Callback] = []
        self.on_idle: Callback | None = None  # runs after each round of I/O and callbacks
        # Counts what may have changed proton endpoints beyond the connection it came in on
        # (timers, callbacks, sockets, dispatched events). on_idle compares it with what it
        # saw last, so a round that only carried heartbeats of idle connections does not
        # make the router look at every connection.
        self.work = 0

    def now(self) -> float:
        return time.monotonic()

    def call_later(self, delay: float, callback: Callback) -> Timer:
        return self.call_at(self.now() + max(delay, 0.0), callback)

    def call_at(self, deadline: float, callback: Callback, quiet: bool = False) -> Timer:
        """`quiet`: the callback adds to `work` itself when it does any."""
        timer = Timer(deadline, next(self._sequence), callback, quiet=quiet)
        heapq.heappush(self._timers, timer)
        return timer

    def call_soon(self, callback: Callback) -> None:
        self._after_io.append(callback)

    def register(self, sock: socket.socket, handler: Readable, events: int) -> None:
        self.selector.register(sock, events, handler)

    def modify(self, sock: socket.socket, handler: Readable, events: int) -> None:
        try:
            key = self.selector.get_key(sock)
        except KeyError:
            self.selector.register(sock, events, handler)
            return
        if key.events != events:
            self.selector.modify(sock, events, handler)

    def unregister(self, sock: socket.socket) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(sock)

    def stop(self) -> None:
        """Safe from a signal handler: the wakeup socket ends the current wait."""
        self._running = False

    def install_signal_wakeup(self) -> None:
        """Make signals interrupt select(); otherwise a handler waits for the next I/O."""
        reader, writer = socket.socketpair()
        reader.setblocking(False)
        writer.setblocking(False)
        signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        self._wakeup = (reader, writer)
        self.register(reader, _Drain(reader), selectors.EVENT_READ)

    def _run_due_timers(self) -> float | None:
        now = self.now()
        while self._timers and (self._timers[0].cancelled or self._timers[0].deadline <= now):
            timer = heapq.heappop(self._timers)
            if not timer.cancelled:
                self.work += not timer.quiet
                _guarded(timer.callback)
        return self._timers[0].deadline - now if self._timers else None

    def run(self) -> None:
        self._running = True
        while self._running:
            self._iterate()

    def run_until(self, condition: Callable[[], bool], timeout: float) -> bool:
        """Run until `condition()` holds or `timeout` seconds pass; returns the condition."""
        deadline = self.now() + timeout
        self._running = True
        while self._running and not condition() and self.now() < deadline:
            self._iterate(max_wait=min(0.1, max(deadline - self.now(), 0.0)))
        return condition()

    def _iterate(self, max_wait: float | None = None) -> None:
        """One round: due timers, ready sockets, queued callbacks, then the idle hook."""
        timeout = self._run_due_timers()
        if self._after_io:
            timeout = 0.0
        if max_wait is not None:
            timeout = max_wait if timeout is None else min(timeout, max_wait)
        for key, mask in self.selector.select(timeout):
            self.work += not getattr(key.data, QUIET, False)
            _serve(key.data, mask)
        pending, self._after_io = self._after_io, []
        self.work += len(pending)
        for callback in pending:
            _guarded(callback)
        if self.on_idle is not None:
            _guarded(self.on_idle)


def _serve(handler: Readable, mask: int) -> None:
    """A ready socket's handler; a bug in it ends that socket's connection, not the loop.

    A handler that can end its connection after such a bug has `drop_after_bug`; one that
    has not (a listening socket) is left as it is: it is tried again on its next event.
    """
    try:
        if mask & selectors.EVENT_READ:
            handler.on_readable()
        if mask & selectors.EVENT_WRITE:
            handler.on_writable()
    except Exception:
        log.exception("socket handler %r failed; ending its connection", handler)
        drop = getattr(handler, "drop_after_bug", None)
        if drop is not None:
            _guarded(drop)


def _guarded(callback: Callback) -> None:
    """Run a loop callback; a bug in one must not stop the router for everyone."""
    try:
        callback()
    except Exception:
        log.exception("callback %r failed", callback)


class _Drain:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def on_readable(self) -> None:
        try:
            while self.sock.recv(512):
                pass
        except BlockingIOError:
            pass

    def on_writable(self) -> None:  # pragma: no cover - never registered for write
        pass
