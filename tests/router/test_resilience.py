"""Path redundancy: routers die under load; traffic reroutes or credit follows reachability."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from proton import Message

from enmesh.clients import OUTCOME_NAMES
from tests.router.conftest import ConsumerFirst, SendN, running_mesh
from tests.support.amqp import run
from tests.support.mesh import Mesh, wait_until


@pytest.fixture
def ring(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    """A - B - C plus the extra A - C link."""
    yield from running_mesh(tmp_path_factory, "ring")


@pytest.fixture
def fragile_chain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    """A - B - C, killed and restarted by its test (so not the shared chain)."""
    yield from running_mesh(tmp_path_factory, "chain")


class KillUnderLoad(ConsumerFirst):
    """Producer on A (0), consumer on C (2); B (1) is killed after `kill_after` accepted."""

    def __init__(self, mesh: Mesh, total: int, kill_after: int) -> None:
        super().__init__(mesh, prefetch=50)
        self.total, self.kill_after = total, kill_after
        self.accepted = self.released = self.sent = 0
        self.received_after_kill = 0
        self.killed = False
        self.state: dict[str, Any] = {}

    def on_sendable(self, event: Any) -> None:
        while event.sender.credit and self.sent < self.total:
            event.sender.send(Message(body=self.sent))
            self.sent += 1

    def on_message(self, event: Any) -> None:
        if self.killed:
            self.received_after_kill += 1

    def on_accepted(self, event: Any) -> None:
        self.accepted += 1
        if self.accepted == self.kill_after and not self.killed:
            self.killed = True
            self.mesh.routers[1].kill()
        self._maybe_done()

    def on_released(self, event: Any) -> None:
        self.released += 1
        self._maybe_done()

    def _maybe_done(self) -> None:
        self.state = {"accepted": self.accepted, "released": self.released, "sent": self.sent}
        if self.accepted + self.released == self.total:
            self.done()


def test_ring_keeps_flowing_when_the_middle_router_dies(ring: Mesh) -> None:
    scenario = run(KillUnderLoad(ring, total=2000, kill_after=500), timeout=60)
    assert scenario.killed
    assert scenario.received_after_kill > 0
    # Every message has an outcome: accepted, or released back (never silently lost).
    assert scenario.accepted + scenario.released == 2000
    assert scenario.accepted >= 1500


class CreditFollowsPath(ConsumerFirst):
    """Chain A - B - C: killing B takes A's producer credit; restarting B brings it back."""

    def __init__(self, mesh: Mesh) -> None:
        super().__init__(mesh)
        self.state: dict[str, Any] = {"phase": "waiting-for-credit", "flows": []}

    def on_link_flow(self, event: Any) -> None:
        if event.link.name != "producer":
            return
        credit, phase = event.link.credit, self.state["phase"]
        self.state["flows"].append((phase, credit))
        if phase == "waiting-for-credit" and credit > 0:
            self.state["phase"] = "b-killed"
            self.mesh.routers[1].kill()
        elif phase == "b-killed" and credit == 0:
            self.state["phase"] = "b-restarted"
            self.mesh.routers[1].start()
        elif phase == "b-restarted" and credit > 0:
            self.state["phase"] = "recovered"
            self.done()


def test_chain_without_redundancy_loses_and_regains_credit(fragile_chain: Mesh) -> None:
    state = run(CreditFollowsPath(fragile_chain), timeout=60).state
    assert state["phase"] == "recovered"
    phases = [phase for phase, _ in state["flows"]]
    assert phases.index("b-killed") < phases.index("b-restarted")


def test_a_router_that_falls_silent_is_lost_within_its_hello_max_age(ring: Mesh) -> None:
    """B stops (SIGSTOP: as a host that froze or lost power, no FIN, no RST): A and C
    notice by its silence after helloMaxAgeSeconds (3 s), not after the 16 s idle
    timeout of its connections."""
    a, b, c = ring.routers
    ring.wait_converged()
    assert b.process is not None
    os.killpg(b.process.pid, signal.SIGSTOP)
    frozen_at = time.monotonic()
    try:
        wait_until(
            lambda: a.reachable_routers() == 1 and c.reachable_routers() == 1,
            10,
            "A and C to lose B",
            interval=0.1,
        )
        lost_after = time.monotonic() - frozen_at
        through = SendN(ring, 50, producer_at=0, consumer_at=2)
        run(through, timeout=30)
        assert through.received == through.accepted == 50
    finally:
        os.killpg(b.process.pid, signal.SIGCONT)
    print(f"B lost by A and C {lost_after:.1f} s after it fell silent")


class PacedThroughB(ConsumerFirst):
    """Producer on A, consumer on C of the chain A - B - C: `total` unsettled messages,
    one every `interval` seconds; the outcomes counted by kind."""

    def __init__(self, mesh: Mesh, total: int, interval: float) -> None:
        super().__init__(mesh)
        self.total, self.interval = total, interval
        self.sent = self.received = 0
        self.outcomes: Counter[str] = Counter()
        self.producer: Any = None

    def on_link_opened(self, event: Any) -> None:
        super().on_link_opened(event)
        if event.link.name == "producer":
            self.producer = event.link
            event.container.schedule(self.interval, self)

    def on_timer_task(self, event: Any) -> None:
        if self.producer.credit > 0 and self.sent < self.total:
            self.producer.send(Message(body=self.sent))
            self.sent += 1
        if self.sent < self.total:
            event.container.schedule(self.interval, self)

    def on_message(self, event: Any) -> None:
        self.received += 1

    def on_settled(self, event: Any) -> None:
        self.outcomes[OUTCOME_NAMES.get(event.delivery.remote_state, "none")] += 1
        if sum(self.outcomes.values()) == self.total:
            self.done()


def test_a_neighbour_that_pauses_past_its_hello_max_age_fails_no_message_in_flight(
    fragile_chain: Mesh,
) -> None:
    """B stops for a moment longer than helloMaxAgeSeconds (a stalled process, a starved
    CPU), then goes on. A routes around it meanwhile, but keeps its connection (closed
    only at the idle timeout, 16 s): what A had sent into it reaches C once B wakes, and
    every producer's message is accepted, none `modified` for a path that was only slow."""
    a, b, _ = fragile_chain.routers
    assert b.process is not None
    scenario = PacedThroughB(fragile_chain, total=600, interval=0.02)
    failures: list[BaseException] = []

    def flow() -> None:
        try:
            run(scenario, timeout=120)
        except BaseException as error:  # reported by the test's thread
            failures.append(error)

    flowing = threading.Thread(target=flow, name="paced-through-b", daemon=True)
    flowing.start()
    wait_until(lambda: scenario.outcomes["accepted"] >= 50, 30, "50 accepted through B")
    os.killpg(b.process.pid, signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        wait_until(lambda: a.reachable_routers() == 0, 10, "A to lose B", interval=0.1)
        lost_after = time.monotonic() - stopped_at
    finally:
        os.killpg(b.process.pid, signal.SIGCONT)
    flowing.join(150)
    assert not flowing.is_alive() and not failures, failures
    assert scenario.outcomes == {"accepted": 600}, scenario.outcomes
    assert scenario.received == 600
    print(f"B silent {lost_after:.1f} s (lost by A), then back: 600 of 600 accepted")
