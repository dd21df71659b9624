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


def _new_sender(rate: float, start_at: float | None = None) -> Sender:
    endpoint = Endpoint("amqp://127.0.0.1:1", "q", None, None, None, None, None, 1.0)
    return Sender(endpoint, [Message(body=i) for i in range(1000)], rate, start_at)


def _sender(rate: float, began_ago: float) -> tuple[Sender, _Link]:
    sender = _new_sender(rate)
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


WALL = 5000.0  # the wall clock, held still too


class _AttachEvent:
    """What `Sender.attach` reads off proton's event: a container that opens the link."""

    def __init__(self, link: _Link) -> None:
        self.container = self
        self.link = link

    def create_sender(self, connection: Any, address: str) -> _Link:
        return self.link


def _attached(rate: float, start_at: float) -> tuple[Sender, _Link]:
    sender, link = _new_sender(rate, start_at), _Link()
    sender.attach(_AttachEvent(link))
    return sender, link


@pytest.mark.parametrize(("start_in", "due"), [(0.5, 0), (-0.1, 11)])
def test_a_sender_given_a_start_paces_from_it_not_from_its_link(
    monkeypatch: pytest.MonkeyPatch, start_in: float, due: int
) -> None:
    """Readings stamped from a wall-clock start go out when the clock reaches each stamp:
    none before the start, and the backlog at once when the link opened late."""
    monkeypatch.setattr(clients.time, "time", lambda: WALL)
    sender, link = _attached(rate=100, start_at=WALL + start_in)
    container = _Container()
    sender.pump(container)
    assert len(link.sent) == due
    (delay,) = container.delays
    # next wake: when the next message is due (at the start, or a hundredth later)
    assert delay == pytest.approx(max(PACE_TICK, start_in + due / 100), abs=1e-9)
