"""AMQP clients that move between two stacks while they work (`enmesh migrate` tests and
benchmarks): python-qpid-proton blocking clients, each in its own thread. A producer's
`send` returns when the far end accepted the message (a consumer for direct addresses,
the broker for stored ones) and raises on any other outcome; the message is then sent
again. Each accepted or received message is timed, and each move noted, so the gap a
client saw while it moved can be measured."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Protocol

from proton import Message, Timeout
from proton.utils import BlockingConnection, SendException

from tests.support.amqp import Account
from tests.support.mesh import wait_until


class Reachable(Protocol):
    """A stack as its clients reach it (a test Mesh, or a site's routers)."""

    passwords: dict[str, str]  # SASL identity -> password
    ca: Path

    def url(self, index: int, tls: bool = False) -> str: ...


class Client(threading.Thread):
    """One AMQP client on one stack at a time; `move_to` reconnects it to the other."""

    def __init__(self, name: str, identity: str, address: str, mesh: Reachable) -> None:
        super().__init__(name=name, daemon=True)
        self.identity, self.address, self.mesh = identity, address, mesh
        self.started, self.moved, self.stop = (
            threading.Event(),
            threading.Event(),
            threading.Event(),
        )
        self._move_request = threading.Event()
        self._next: Reachable | None = None
        self.error: BaseException | None = None
        self.times: list[float] = []  # when each message was accepted (or received)
        self.moves: list[int] = []  # how many it had when each move began

    def connect(self) -> BlockingConnection:
        space = self.identity.split("@", 1)[1]
        password = self.mesh.passwords[self.identity]
        return Account(self.mesh.url(0), self.identity, password, space, self.mesh.ca).blocking(
            timeout=30
        )

    def move_to(self, mesh: Reachable) -> None:
        self._next = mesh
        self.moved.clear()
        self._move_request.set()
        assert self.moved.wait(60), f"{self.name} did not move"
        assert self.error is None, f"{self.name}: {self.error!r}"

    def _moving(self) -> bool:
        if not self._move_request.is_set():
            return False
        assert self._next is not None
        self.moves.append(len(self.times))
        self.mesh = self._next
        self._move_request.clear()
        return True

    def run(self) -> None:
        try:
            self.work()
        except BaseException as error:
            self.error = error
            self.started.set()
            self.moved.set()

    def work(self) -> None:
        raise NotImplementedError


class Producer(Client):
    def __init__(self, name: str, identity: str, address: str, mesh: Reachable) -> None:
        super().__init__(name, identity, address, mesh)
        self.sent: list[str] = []
        self.sent_again = 0  # released or modified, sent once more

    def work(self) -> None:
        connection = self.connect()
        sender = connection.create_sender(self.address)
        self.started.set()
        number = 0
        while not self.stop.is_set():
            if self._moving():
                connection.close()
                connection = self.connect()
                sender = connection.create_sender(self.address)
                self.moved.set()
            body = f"{self.name}-{number}"
            try:
                sender.send(Message(body=body, durable=True), timeout=30)
            except SendException:
                self.sent_again += 1
                continue
            self.sent.append(body)
            self.times.append(time.monotonic())
            number += 1
        connection.close()


class Consumer(Client):
    def __init__(self, name: str, identity: str, address: str, mesh: Reachable) -> None:
        super().__init__(name, identity, address, mesh)
        self.got: list[str] = []

    def work(self) -> None:
        connection = self.connect()
        receiver = connection.create_receiver(self.address, credit=20)
        self.started.set()
        while True:
            if self._moving():
                connection.close()  # what it had not accepted goes back (released)
                connection = self.connect()
                receiver = connection.create_receiver(self.address, credit=20)
                self.moved.set()
            try:
                message = receiver.receive(timeout=0.5)
            except Timeout:
                if self.stop.is_set():
                    break
                continue
            self.got.append(str(message.body))
            self.times.append(time.monotonic())
            receiver.accept()
        connection.close()


def progress(client: Producer | Consumer) -> int:
    return len(client.sent) if isinstance(client, Producer) else len(client.got)


def move(client: Producer | Consumer, mesh: Reachable, more: int = 10) -> None:
    """Move one client, then wait until it has sent or received `more` there."""
    client.move_to(mesh)
    before = progress(client)
    wait_until(lambda: progress(client) >= before + more or client.error is not None, 60,
               f"{client.name} to go on after its move")  # fmt: skip
    assert client.error is None, f"{client.name}: {client.error!r}"


def gaps(client: Client) -> list[float]:
    """Per move, seconds between the last message before it and the first after it."""
    return [
        client.times[index] - client.times[index - 1]
        for index in client.moves
        if 0 < index < len(client.times)
    ]
