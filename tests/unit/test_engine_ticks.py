"""A busy connection does not arm a new proton timer (heartbeats, idle timeout) per wake-up.

Every frame moves proton's next deadline a little later. A ProtonSocket that cancelled its
timer and armed a new one for each moved deadline paid a Timer, a heap push and a pop per
wake-up: at one message per wake-up, a visible share of the router's CPU. The timer now
stays armed for the earlier deadline and arms the next when it fires. Two engines over a
loopback TCP connection exchange messages one wake-up at a time.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
from proton import Event, Receiver, Sender, Transport

from enmesh.router.engine import Loop, ProtonSocket

MESSAGES = 300


class Peer:
    """Opens what the other side opens; the receiving side keeps counting and crediting."""

    def __init__(self) -> None:
        self.received = 0

    def on_event(self, source: ProtonSocket, event: Event) -> None:
        opened: dict[Any, Any] = {
            Event.CONNECTION_REMOTE_OPEN: event.connection,
            Event.SESSION_REMOTE_OPEN: event.session,
            Event.LINK_REMOTE_OPEN: event.link,
        }
        endpoint = opened.get(event.type)
        if endpoint is not None and endpoint.state & endpoint.LOCAL_UNINIT:
            endpoint.open()
            if isinstance(endpoint, Receiver):
                endpoint.flow(MESSAGES)
        delivery = event.delivery if event.type == Event.DELIVERY else None
        if delivery is not None and isinstance(event.link, Receiver) and not delivery.partial:
            event.link.recv(delivery.pending)
            event.link.advance()
            delivery.settle()
            self.received += 1

    def on_closed(self, source: ProtonSocket) -> None:
        pass


@pytest.fixture
def loop() -> Iterator[Loop]:
    loop = Loop()
    yield loop
    loop.selector.close()


def _engine(loop: Loop, sock: socket.socket, mode: Any, handler: Peer) -> ProtonSocket:
    transport = Transport(mode)
    transport.idle_timeout = 8.0  # both sides: proton has deadlines to keep
    return ProtonSocket(loop, sock, transport, handler, peer=f"pair-{mode}")


def _tcp_pair() -> tuple[socket.socket, socket.socket]:
    """Two ends of a loopback TCP connection (the engine sets TCP_NODELAY)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        near = socket.create_connection(listener.getsockname())
        far, _ = listener.accept()
    return near, far


def test_a_busy_connection_does_not_arm_a_timer_per_wake_up(loop: Loop) -> None:
    near, far = _tcp_pair()
    sending, receiving = Peer(), Peer()
    client = _engine(loop, near, Transport.CLIENT, sending)
    server = _engine(loop, far, Transport.SERVER, receiving)
    client.connection.open()
    session = client.connection.session()
    session.open()
    sender: Sender = session.sender("out")
    sender.open()
    client.process()
    assert loop.run_until(lambda: sender.credit > 0, 5), "the receiver never gave credit"
    armed_before = next(loop._sequence)  # every timer the loop arms takes a number
    for n in range(MESSAGES):
        sender.delivery(str(n))
        sender.send(b"x" * 20)
        sender.advance()
        client.process()
        assert loop.run_until(lambda: receiving.received == n + 1, 5)  # noqa: B023 - now
    armed = next(loop._sequence) - armed_before - 1
    assert receiving.received == MESSAGES
    assert armed < MESSAGES // 10, f"{armed} timers armed for {MESSAGES} messages"  # 71 before
    client.drop()
    server.drop()
