"""A steady producer and consumer on a queue through the mesh, for the checks that change
a running site (a rolling upgrade, a rolling broker restart): each keeps a connection to
one of the routers and moves on to the next one when its own goes."""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from proton import ProtonException, Timeout

from enmesh.deploy.smoke import Stack
from tests.sites.clients import RECEIVER, SENDER, SPACE, router_url, send_until_accepted
from tests.support.mesh import wait_until

QUEUE = "events"
RATE = 20.0  # messages per second


class _Steady(threading.Thread):
    """Keeps a connection to one of the routers, moving on to the next one when it goes."""

    def __init__(self, stack: Stack, urls: list[str], identity: str) -> None:
        super().__init__(name=f"steady-{identity}", daemon=True)
        self.stack, self.urls, self.identity = stack, urls, identity
        self.stop = threading.Event()
        self.reconnects: list[str] = []

    def run(self) -> None:
        for url in itertools.cycle(self.urls):
            if self.stop.is_set():
                return
            try:
                with self.stack.connect(url, self.identity, SPACE) as connection:
                    self.session(connection)
            except (ProtonException, OSError) as exc:
                self.reconnects.append(f"{url}: {type(exc).__name__}")
                self.stop.wait(0.2)  # back off before the next router

    def session(self, connection: Any) -> None:
        raise NotImplementedError


class SteadyProducer(_Steady):
    """Sends RATE durable messages a second, each again until the mesh accepts it;
    records when each was acknowledged."""

    def __init__(self, stack: Stack, urls: list[str], nonce: str) -> None:
        super().__init__(stack, urls, SENDER)
        self.nonce, self.sent = nonce, 0
        self.acknowledged: list[tuple[float, str]] = []
        self.retries: list[str] = []

    def session(self, connection: Any) -> None:
        sender = connection.create_sender(QUEUE)
        started = time.monotonic() - self.sent / RATE
        while not self.stop.is_set():
            body = f"{self.nonce} {self.sent}"
            send_until_accepted(sender, body, self.retries)  # again after a reconnect
            self.acknowledged.append((time.monotonic(), body))
            self.sent += 1
            self.stop.wait(max(0.0, started + self.sent / RATE - time.monotonic()))


class SteadyConsumer(_Steady):
    """Receives and accepts, keeping the bodies that carry its producer's nonce."""

    def __init__(self, stack: Stack, urls: list[str], nonce: str) -> None:
        super().__init__(stack, urls, RECEIVER)
        self.nonce = nonce
        self.got: list[str] = []

    def session(self, connection: Any) -> None:
        receiver = connection.create_receiver(QUEUE, credit=50)
        while not self.stop.is_set():
            try:
                message = receiver.receive(timeout=1)
            except Timeout:
                continue
            receiver.accept()
            if str(message.body).startswith(self.nonce):
                self.got.append(str(message.body))


@contextmanager
def steady_traffic(
    stack: Stack, deployment: dict[str, Any]
) -> Iterator[tuple[SteadyProducer, SteadyConsumer]]:
    """A producer and a consumer on QUEUE at RATE, started at opposite ends of the list of
    router hosts and running steadily when the block starts. When it ends, the producer
    stops and the consumer runs until it has every acknowledged message (up to 180 s)."""
    nonce = uuid.uuid4().hex
    urls = [router_url(deployment, h) for h in sorted({r["host"] for r in deployment["routers"]})]
    producer = SteadyProducer(stack, urls, nonce)
    consumer = SteadyConsumer(stack, urls[::-1], nonce)
    consumer.start()
    producer.start()
    try:
        wait_until(lambda: len(producer.acknowledged) >= RATE * 5, 60, "steady traffic")
        yield producer, consumer
        producer.stop.set()
        producer.join(60)
        acknowledged = {body for _, body in producer.acknowledged}
        wait_until(
            lambda: acknowledged <= set(consumer.got), 180, "every acknowledged message", 0.5
        )
    finally:
        producer.stop.set()
        consumer.stop.set()
    consumer.join(30)
