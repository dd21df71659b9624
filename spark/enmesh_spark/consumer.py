"""A receiver that settles exactly the deliveries it is told to, from any thread.

Spark commits a micro-batch after it has already read part of the next one, so "accept
everything received so far" would acknowledge rows that were never stored. This
consumer runs proton's event loop on its own thread, hands messages out in arrival order
with their delivery, and accepts given deliveries only when asked. Credit is replenished
only as deliveries are settled, so at most `window` messages are ever held unsettled.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proton import Delivery, Message
from proton.handlers import MessagingHandler
from proton.reactor import ApplicationEvent, Container, EventInjector

from enmesh.clients import connect_options


class ConsumerError(Exception):
    """The connection or link failed; the message says why (never a password)."""


@dataclass(frozen=True)
class Received:
    message: Message
    delivery: Any  # proton.Delivery, settled on the consumer's thread only


# A router silent this long is taken as gone (its host may have lost power: no FIN, no
# RST); proton sends a frame every half of it, and the router does the same.
HEARTBEAT_SECONDS = 10.0


@dataclass(frozen=True)
class Source:
    url: str  # one URL, or several separated by commas: the first that opens is used
    address: str
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    vhost: str | None = None
    ca: str | None = None
    window: int = 1000

    def urls(self) -> list[str]:
        return [url.strip() for url in self.url.split(",") if url.strip()]


class _Handler(MessagingHandler):
    def __init__(self, source: Source, url: str, inbox: queue.Queue[Received | Exception]) -> None:
        super().__init__(prefetch=0, auto_accept=False, auto_settle=False)
        self.source, self.url, self.inbox = source, url, inbox
        self.injector = EventInjector()
        self.receiver: Any = None
        self.connection: Any = None
        self.opened = threading.Event()

    def on_start(self, event: Any) -> None:
        event.container.selectable(self.injector)
        options = connect_options_of(self.source, self.url)
        self.connection = event.container.connect(**options, heartbeat=HEARTBEAT_SECONDS)
        self.receiver = event.container.create_receiver(self.connection, self.source.address)

    def on_link_opened(self, event: Any) -> None:
        if event.link.is_receiver:  # our only link
            event.link.flow(self.source.window)
            self.opened.set()

    def on_message(self, event: Any) -> None:
        self.inbox.put(Received(event.message, event.delivery))

    def on_settle(self, event: Any) -> None:  # an ApplicationEvent from `accept`
        deliveries = event.subject
        for delivery in deliveries:
            delivery.update(Delivery.ACCEPTED)
            delivery.settle()
        if self.receiver is not None:
            self.receiver.flow(len(deliveries))

    def on_stop_container(self, event: Any) -> None:  # from `Consumer.close`
        if self.connection is not None:
            self.connection.close()
        self.injector.close()

    def _fail(self, what: str, condition: Any) -> None:
        reason = f"{condition.name}: {condition.description}" if condition else "closed"
        self.inbox.put(ConsumerError(f"{what} {self.url} {self.source.address}: {reason}"))
        self.opened.set()

    def on_link_error(self, event: Any) -> None:
        self._fail("link to", event.link.remote_condition)

    def on_connection_error(self, event: Any) -> None:
        self._fail("connection to", event.connection.remote_condition)

    def on_transport_error(self, event: Any) -> None:
        self._fail("transport to", event.transport.condition)

    def on_disconnected(self, event: Any) -> None:
        self._fail("disconnected from", None)


def connect_options_of(source: Source, url: str) -> dict[str, Any]:
    """`Container.connect` keywords for `source`'s user at `url` (one of its URLs)."""
    return connect_options(
        url,
        user=source.user,
        password=source.password,
        vhost=source.vhost,
        ca=None if source.ca is None else Path(source.ca),
        mechanisms="SCRAM-SHA-256 PLAIN",
    )


class Consumer:
    """Receive from `source` on a background thread; `accept` settles given deliveries.

    The source's URLs are tried in turn, each for `open_timeout` seconds: a router whose
    host is down does not stop the job, which a restart brings to the next one.
    """

    def __init__(self, source: Source, open_timeout: float = 15) -> None:
        problems = []
        for url in source.urls():
            try:
                self._open(source, url, open_timeout)
                return
            except ConsumerError as error:
                problems.append(str(error))
        raise ConsumerError("; ".join(problems) or f"no URL for {source.address}")

    def _open(self, source: Source, url: str, open_timeout: float) -> None:
        self.inbox: queue.Queue[Received | Exception] = queue.Queue()
        self._handler = _Handler(source, url, self.inbox)
        self._container = Container(self._handler)
        self._thread = threading.Thread(target=self._container.run, daemon=True, name="amqp")
        self._thread.start()
        if not self._handler.opened.wait(open_timeout):
            self.close()
            raise ConsumerError(f"no link to {source.address} at {url} in {open_timeout}s")
        try:
            self._raise_pending()
        except ConsumerError:
            self.close()
            raise

    def _raise_pending(self) -> None:
        try:
            item = self.inbox.get_nowait()
        except queue.Empty:
            return
        if isinstance(item, Exception):
            raise item
        self.inbox.queue.appendleft(item)  # not an error: give it back, first in line

    def take(self, limit: int, wait: float) -> list[Received]:
        """Up to `limit` messages; waits at most `wait` seconds for the first one."""
        taken: list[Received] = []
        timeout: float | None = wait
        while len(taken) < limit:
            try:
                item = self.inbox.get(timeout=timeout) if timeout else self.inbox.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, Exception):
                raise item
            taken.append(item)
            timeout = None  # after the first, take only what is already here
        return taken

    def accept(self, deliveries: Iterable[Any]) -> None:
        batch = list(deliveries)
        if batch:
            self._handler.injector.trigger(ApplicationEvent("settle", subject=batch))

    def close(self) -> None:
        self._handler.injector.trigger(ApplicationEvent("stop_container"))
        self._thread.join(timeout=10)
