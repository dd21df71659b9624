"""Large messages stream through the mesh (Q2/Q3 hold-off); unsettled multicast settles
end to end; batched and pre-settled dispositions reach producers (qdrouterd 1.19)."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from proton import Condition, Delivery, Message

from tests.router.conftest import account
from tests.support.amqp import Scenario, run
from tests.support.mesh import Mesh, RouterProcess, build_mesh

MB = 1 << 20
POLL = 0.1


def _encoded(size: int) -> bytes:
    return Message(body=os.urandom(size)).encode()


def _rss_kb(router: RouterProcess) -> int:
    assert router.process is not None
    status = Path(f"/proc/{router.process.pid}/status").read_text()
    match = re.search(r"^VmRSS:\s+(\d+) kB", status, re.M)
    assert match, status
    return int(match[1])


def _buffered(router: RouterProcess) -> int:
    gauge = r"^enmesh_router_stream_buffered_bytes\{[^}]*\} (\d+)"
    match = re.search(gauge, router.metrics(), re.M)
    return int(match[1]) if match else -1  # -1: a router without the gauge


def _send_raw(sender: Any, data: bytes, tag: str, *, complete: bool = True) -> Any:
    delivery = sender.delivery(tag)
    sender.stream(data)
    if complete:
        sender.advance()
    return delivery


class StreamAcross(Scenario):
    """One `size`-byte message from router 0 to a consumer on router 2 of a chain."""

    def __init__(self, mesh: Mesh, size: int) -> None:
        super().__init__(auto_accept=True)
        self.mesh, self.payload = mesh, _encoded(size)
        self.sending: Any = None
        self.left_at_first_bytes: int | None = None  # producer's unsent bytes then
        self.digest: str | None = None
        self.outcome: int | None = None

    def on_start(self, event: Any) -> None:
        conn = self.open(account(self.mesh, 2, "backend@iot"))
        event.container.create_receiver(conn, "telemetry", name="consumer")

    def on_link_opened(self, event: Any) -> None:
        if event.link.name == "consumer":
            conn = self.open(account(self.mesh, 0, "device@iot"))
            event.container.create_sender(conn, "telemetry", name="producer")

    def on_sendable(self, event: Any) -> None:
        if self.sending is None:
            self.sending = _send_raw(event.sender, self.payload, "big")

    def on_delivery(self, event: Any) -> None:
        delivery = event.delivery
        if delivery.link.is_receiver and self.left_at_first_bytes is None and delivery.pending:
            self.left_at_first_bytes = self.sending.pending if self.sending else -1

    def on_message(self, event: Any) -> None:
        self.digest = hashlib.sha256(event.message.body).hexdigest()

    def on_accepted(self, event: Any) -> None:
        self.outcome = event.delivery.remote_state
        self.done()


def test_a_10mb_message_streams_across_three_routers_intact(chain: Mesh) -> None:
    scenario = run(StreamAcross(chain, 10 * MB), timeout=120)
    sent = Message()
    sent.decode(scenario.payload)
    assert scenario.digest == hashlib.sha256(sent.body).hexdigest()
    assert scenario.outcome == Delivery.ACCEPTED


class StalledReceiver(Scenario):
    """A consumer on router 2 that takes no bytes (a 64 KB session window it never frees);
    a producer on router 0 sends one `size`-byte message. Ends once the producer has been
    unable to hand over any more and the routers' memory has stopped growing."""

    STABLE = 20

    def __init__(self, mesh: Mesh, size: int) -> None:
        super().__init__()
        self.mesh, self.payload = mesh, _encoded(size)
        self.sending: Any = None
        self.history: list[tuple[int, ...]] = []
        self.rss_growth_kb: list[int] = []
        self.buffered: list[int] = []
        self.before = [_rss_kb(r) for r in mesh.routers]

    def on_start(self, event: Any) -> None:
        conn = self.open(account(self.mesh, 2, "backend@iot"))
        session = conn.session()
        session.incoming_capacity = 64 * 1024  # >= proton's 32 KB frames; never freed
        session.open()
        receiver = session.receiver("stalled")
        receiver.source.address = "telemetry"
        receiver.target.address = None
        receiver.open()
        receiver.flow(1)

    def on_link_opened(self, event: Any) -> None:
        if event.link.name == "stalled":
            conn = self.open(account(self.mesh, 0, "device@iot"))
            event.container.create_sender(conn, "telemetry", name="producer")

    def on_sendable(self, event: Any) -> None:
        if self.sending is None:
            self.sending = _send_raw(event.sender, self.payload, "big")
            event.container.schedule(POLL, self)

    def on_timer_task(self, event: Any) -> None:
        # Settled when neither the producer's unsent bytes nor any router's RSS (in MB)
        # has changed for STABLE polls: nothing more is moving.
        now = [_rss_kb(r) for r in self.mesh.routers]
        self.history.append((self.sending.pending, *(kb // 1024 for kb in now)))
        recent = self.history[-self.STABLE :]
        if len(recent) == self.STABLE and len(set(recent)) == 1:
            self.rss_growth_kb = [a - b for a, b in zip(now, self.before, strict=True)]
            self.buffered = [_buffered(r) for r in self.mesh.routers]
            self.done()
            return
        event.container.schedule(POLL, self)


SESSION_FRAMES = 128  # 2 MB per session at the default 16 KB frame


def bound_session_windows(mesh: Mesh, frames: int) -> None:
    """Set maxSessionFrames on every listener and connector (unbounded by default)."""
    for router in mesh.routers:
        text = router.config.read_text()
        for entity in ("listener {", "connector {"):
            text = text.replace(entity, f"{entity}\n    maxSessionFrames: {frames}")
        router.config.write_text(text)


@pytest.fixture
def own_chain(tmp_path: Path) -> Iterator[Mesh]:
    """A chain of its own (a stalled path must not be left to the other tests), whose
    session windows are bounded: so Q2 reaches the producer."""
    mesh = build_mesh(tmp_path / "chain", routers=3, topology="chain")
    bound_session_windows(mesh, SESSION_FRAMES)
    try:
        mesh.start()
        mesh.wait_converged()
        yield mesh
    finally:
        mesh.stop()


def test_a_stalled_receiver_holds_the_producer_not_the_routers_memory(own_chain: Mesh) -> None:
    size = 40 * MB
    scenario = run(StalledReceiver(own_chain, size), timeout=120)
    left = scenario.sending.pending
    assert left > size // 2, f"the routers took {size - left} bytes for a stalled receiver"
    # Q2 (128 KB) plus what one read takes from proton (a whole session window) at most.
    assert max(scenario.buffered) <= SESSION_FRAMES * 16384, scenario.buffered
    assert max(scenario.rss_growth_kb) < 16 * 1024, scenario.rss_growth_kb


def test_the_path_carries_messages_again_after_a_stalled_receiver_left(own_chain: Mesh) -> None:
    run(StalledReceiver(own_chain, 8 * MB), timeout=120)
    assert run(StreamAcross(own_chain, 100 * 1024), timeout=20).outcome == Delivery.ACCEPTED


class AbortMidway(Scenario):
    """The producer sends 1 MB of a 4 MB message, then aborts it once the consumer (router 2)
    has seen bytes of it; then it sends a small message on the same link."""

    def __init__(self, mesh: Mesh) -> None:
        super().__init__()
        self.mesh, self.payload = mesh, _encoded(4 * MB)
        self.sender: Any = None
        self.sending: Any = None
        self.aborted_seen = False
        self.after: list[str] = []

    def on_start(self, event: Any) -> None:
        conn = self.open(account(self.mesh, 2, "backend@iot"))
        event.container.create_receiver(conn, "telemetry", name="consumer")

    def on_link_opened(self, event: Any) -> None:
        if event.link.name == "consumer":
            conn = self.open(account(self.mesh, 0, "device@iot"))
            self.sender = event.container.create_sender(conn, "telemetry", name="producer")

    def on_sendable(self, event: Any) -> None:
        if self.sending is None:
            self.sending = _send_raw(event.sender, self.payload[:MB], "big", complete=False)

    def on_delivery(self, event: Any) -> None:
        delivery = event.delivery
        sending = self.sending
        if delivery.link.is_receiver and delivery.partial and sending and not sending.settled:
            sending.abort()  # the consumer has bytes of it: now cut it off

    def on_aborted(self, event: Any) -> None:
        self.aborted_seen = True
        self.sender.send(Message(body="after the abort"))

    def on_message(self, event: Any) -> None:
        self.after.append(event.message.body)
        self.done()


def test_an_aborted_delivery_aborts_its_streamed_copy(own_chain: Mesh) -> None:
    # Its own chain: a router that buffers whole messages is left stuck by this one.
    scenario = run(AbortMidway(own_chain), timeout=60)
    assert scenario.aborted_seen
    assert scenario.after == ["after the abort"]


class UnsettledMulticast(Scenario):
    """Listeners (device@iot) on routers 0, 1, 2; the announcer (backend@iot, router 0)
    sends each message of `plan` unsettled. A listener settles a message only when all
    three have it, listener 2 last; plan[i][j] is listener j's outcome for message i."""

    def __init__(self, mesh: Mesh, plan: list[tuple[str, str, str]]) -> None:
        super().__init__(auto_accept=False, auto_settle=False)
        self.mesh, self.plan = mesh, plan
        self.ready = self.sent = 0
        self.got: dict[int, dict[int, Any]] = {}
        self.events: list[tuple[str, int, int]] = []  # (what, message, listener or state)
        self.outcomes: dict[int, tuple[int, Any]] = {}

    def on_start(self, event: Any) -> None:
        for i in range(3):
            conn = self.open(account(self.mesh, i, "device@iot"))
            event.container.create_receiver(conn, "broadcast", name=f"listener-{i}")

    def on_link_opened(self, event: Any) -> None:
        if event.link.name.startswith("listener-"):
            self.ready += 1
            if self.ready == 3:
                conn = self.open(account(self.mesh, 0, "backend@iot"))
                event.container.create_sender(conn, "broadcast", name="announcer")

    def on_sendable(self, event: Any) -> None:
        while event.sender.credit and self.sent < len(self.plan):
            delivery = event.sender.send(Message(id=self.sent, body=self.sent))
            delivery.index = self.sent
            self.sent += 1

    def on_message(self, event: Any) -> None:
        index, listener = event.message.body, int(event.receiver.name.rsplit("-", 1)[1])
        self.got.setdefault(index, {})[listener] = event.delivery
        if len(self.got[index]) == 3:
            for j in (0, 1):
                self._settle(index, j)
            event.container.schedule(0.5, _Call(lambda: self._settle(index, 2)))

    def _settle(self, index: int, listener: int) -> None:
        delivery, outcome = self.got[index][listener], self.plan[index][listener]
        if outcome == "reject":
            delivery.local.condition = Condition("app:refused", f"listener {listener}")
        state = {"accept": Delivery.ACCEPTED, "reject": Delivery.REJECTED}.get(outcome)
        delivery.update(state or Delivery.RELEASED)
        delivery.settle()
        self.events.append(("settled", index, listener))

    def _outcome(self, event: Any) -> None:
        delivery = event.delivery
        condition = delivery.remote.condition
        self.outcomes[delivery.index] = (
            delivery.remote_state,
            (condition.name, condition.description) if condition else None,
        )
        self.events.append(("outcome", delivery.index, delivery.remote_state))
        if len(self.outcomes) == len(self.plan):
            self.done()

    on_accepted = on_rejected = on_released = on_modified = _outcome


class _Call:
    def __init__(self, callback: Any) -> None:
        self.callback = callback

    def on_timer_task(self, event: Any) -> None:
        self.callback()


def test_unsettled_multicast_settles_with_the_strongest_outcome_after_the_last_copy(
    full_mesh: Mesh,
) -> None:
    plan = [("accept", "accept", "reject"), ("accept", "accept", "accept")]
    plan += [("release", "accept", "release"), ("release", "release", "release")]
    scenario = run(UnsettledMulticast(full_mesh, plan), timeout=60)
    assert scenario.outcomes[0] == (Delivery.REJECTED, ("app:refused", "listener 2"))
    assert scenario.outcomes[1] == (Delivery.ACCEPTED, None)
    assert scenario.outcomes[2] == (Delivery.ACCEPTED, None)  # accepted beats released
    assert scenario.outcomes[3] == (Delivery.RELEASED, None)
    for index in range(len(plan)):  # never before the last listener settled
        events = scenario.events
        assert events.index(("settled", index, 2)) < next(
            i for i, e in enumerate(events) if e[0] == "outcome" and e[1] == index
        )


class BatchedDispositions(Scenario):
    """Producer on router 0 sends `total` messages unsettled to `address`; every consumer
    holds its deliveries until it has all of them, then settles them in one go (proton
    sends one disposition frame per range), the first half accepted and the rest with
    `second` (consumers on `consumers_at`)."""

    def __init__(
        self, mesh: Mesh, address: str, consumers_at: tuple[int, ...], total: int, second: str
    ) -> None:
        super().__init__(auto_accept=False, auto_settle=False, prefetch=total)
        self.mesh, self.address, self.consumers_at = mesh, address, consumers_at
        self.total, self.second = total, second
        self.ready = self.sent = 0
        self.held: dict[str, list[Any]] = {}
        self.outcomes: dict[int, int] = {}
        sender_id, receiver_id = ("backend@iot", "device@iot")
        if address == "telemetry":
            sender_id, receiver_id = receiver_id, sender_id
        self.ids = sender_id, receiver_id

    def on_start(self, event: Any) -> None:
        for i in self.consumers_at:
            conn = self.open(account(self.mesh, i, self.ids[1]))
            event.container.create_receiver(conn, self.address, name=f"consumer-{i}")

    def on_link_opened(self, event: Any) -> None:
        if event.link.name.startswith("consumer-"):
            self.ready += 1
            if self.ready == len(self.consumers_at):
                conn = self.open(account(self.mesh, 0, self.ids[0]))
                event.container.create_sender(conn, self.address, name="producer")

    def on_sendable(self, event: Any) -> None:
        while event.sender.credit and self.sent < self.total:
            delivery = event.sender.send(Message(body=self.sent))
            delivery.index = self.sent
            self.sent += 1

    def on_message(self, event: Any) -> None:
        held = self.held.setdefault(event.receiver.name, [])
        held.append(event.delivery)
        if len(held) < self.total:
            return
        for n, delivery in enumerate(held):  # all in one go: ranges on the wire
            if n >= self.total // 2 and self.second == "reject":
                delivery.update(Delivery.REJECTED)
            else:
                delivery.update(Delivery.ACCEPTED)
            delivery.settle()

    def _outcome(self, event: Any) -> None:
        self.outcomes[event.delivery.index] = event.delivery.remote_state
        if len(self.outcomes) == self.total:
            self.done()

    on_accepted = on_rejected = on_released = on_modified = _outcome


def test_batched_dispositions_reach_the_producer_across_two_hops(chain: Mesh) -> None:
    total = 40
    scenario = run(BatchedDispositions(chain, "telemetry", (2,), total, "reject"), timeout=60)
    half = total // 2
    assert [scenario.outcomes[i] for i in range(total)] == [Delivery.ACCEPTED] * half + [
        Delivery.REJECTED
    ] * half


def test_batched_multicast_dispositions_combine_per_message(full_mesh: Mesh) -> None:
    """Three listeners settle 20 copies each in one go; the producer's outcome of each
    message combines all three (half rejected by every listener)."""
    total = 20
    scenario = run(
        BatchedDispositions(full_mesh, "broadcast", (0, 1, 2), total, "reject"), timeout=60
    )
    half = total // 2
    assert [scenario.outcomes[i] for i in range(total)] == [Delivery.ACCEPTED] * half + [
        Delivery.REJECTED
    ] * half
