"""A paced sender sends what is due and then sleeps at least one tick, with one timer
at a time (not one per message or per settlement)."""

from __future__ import annotations

from typing import Any

import pytest
from proton import Message

from enmesh import clients
from enmesh.clients import PACE_TICK, Endpoint, Sender

NOW = 1000.0  # the clock the sender reads, held still: the figures do not depend on speed


class _Link:
    credit = 10_000

    def __init__(self) -> None:
        self.sent: list[Message] = []

    def send(self, message: Message) -> None:
        self.sent.append(message)


class _Container:
    def __init__(self) -> None:
        self.delays: list[float] = []

    def schedule(self, delay: float, handler: Any) -> None:
        self.delays.append(delay)


@pytest.fixture(autouse=True)
def _still_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(clients.time, "monotonic", lambda: NOW)


def _sender(rate: float, began_ago: float) -> tuple[Sender, _Link]:
    endpoint = Endpoint("amqp://127.0.0.1:1", "q", None, None, None, None, None, 1.0)
    sender = Sender(endpoint, [Message(body=i) for i in range(1000)], rate)
    sender.link, sender.began = _Link(), NOW - began_ago
    return sender, sender.link


def test_a_paced_sender_sends_what_is_due_and_sleeps_a_tick() -> None:
    sender, link = _sender(rate=1000, began_ago=0.0305)
    container = _Container()
    sender.pump(container)
    # due: the messages of the first 30.5 ms and the one of the current millisecond
    assert 31 <= len(link.sent) <= 33
    (delay,) = container.delays
    assert delay >= PACE_TICK  # one wake-up per tick, not per message
    # every settlement pumps too: nothing is due yet, and the wake-up is already set
    sender.pump(container)
    sender.pump(container)
    assert len(container.delays) == 1


def test_a_slow_rate_sleeps_until_the_next_message_is_due() -> None:
    sender, link = _sender(rate=2, began_ago=0.0)
    container = _Container()
    sender.pump(container)
    assert len(link.sent) == 1
    (delay,) = container.delays
    assert 0.4 < delay <= 0.5
