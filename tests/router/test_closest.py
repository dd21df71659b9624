"""`distribution: closest` across a real 3-router chain (0 - 1 - 2): every message goes to
the nearest consumer, never shared as `balanced` shares it.

The sample model's `telemetry` (anycast, compiled `balanced`) is made `closest` in every
router's config, as an operator's `address` entity would. The producer starts only once
router 0's management reports the remote consumers (`remoteHostRouters`), so the choice
is made with the whole mesh known, as it is in a mesh that has run a while.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from proton import Message

from tests.router.conftest import account, running_mesh
from tests.support.amqp import Scenario, run
from tests.support.mesh import Mesh
from tests.support.qdmanage import Qdmanage, add_administrator, rows

BALANCED = "address {\n    distribution: balanced\n    prefix: iot/telemetry\n}"
CLOSEST = "address {\n    distribution: closest\n    prefix: iot/telemetry\n}"
MESSAGES = 60


def _closest(mesh: Mesh) -> None:
    for router in mesh.routers:
        text = router.config.read_text()
        assert BALANCED in text, "the compiled config changed shape"
        router.config.write_text(text.replace(BALANCED, CLOSEST))


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    yield from running_mesh(tmp_path_factory, "chain", prepare=_closest)


def remote_routers_seen_by_router_0(mesh: Mesh) -> set[str]:
    """The routers router 0 knows to have a consumer of telemetry (its management's view)."""
    with Qdmanage(add_administrator(mesh)) as client:
        found = rows(client.query("router.address", ["name", "remoteHostRouters"]))
    return {
        router
        for row in found
        if str(row["name"]).endswith("iot/telemetry")
        for router in row["remoteHostRouters"] or []
    }


class Closest(Scenario):
    """Consumers on `consumers_at`; once router 0 sees the remote ones, a producer on
    router 0 sends MESSAGES unsettled. Counts what each consumer got."""

    def __init__(self, mesh: Mesh, consumers_at: tuple[int, ...]) -> None:
        super().__init__(prefetch=MESSAGES)
        self.mesh, self.consumers_at = mesh, consumers_at
        self.names: dict[str, int] = {}
        self.opened: set[str] = set()
        self.by_router: Counter[int] = Counter()
        self.sent = self.accepted = 0
        self.producing = False

    def on_start(self, event: Any) -> None:
        for at in self.consumers_at:
            name = f"consumer-{at}"
            self.names[name] = at
            connection = self.open(account(self.mesh, at, "backend@iot"))
            event.container.create_receiver(connection, "telemetry", name=name)

    def on_link_opened(self, event: Any) -> None:
        if event.link.name in self.names:
            self.opened.add(event.link.name)
            if self.opened == set(self.names):
                self.on_timer_task(event)

    def on_timer_task(self, event: Any) -> None:
        """Poll router 0's view of the mesh (a readiness check), then start the producer."""
        wanted = {f"test-router-{at}" for at in self.consumers_at if at != 0}
        known = remote_routers_seen_by_router_0(self.mesh)
        if not wanted <= {name.rsplit("/", 1)[-1] for name in known}:
            event.container.schedule(0.1, self)
            return
        self.producing = True
        connection = self.open(account(self.mesh, 0, "device@iot"))
        event.container.create_sender(connection, "telemetry", name="producer")

    def on_sendable(self, event: Any) -> None:
        while self.producing and event.sender.credit and self.sent < MESSAGES:
            event.sender.send(Message(body=f"reading {self.sent}"))
            self.sent += 1

    def on_message(self, event: Any) -> None:
        self.by_router[self.names[event.receiver.name]] += 1

    def on_accepted(self, event: Any) -> None:
        self.accepted += 1
        if self.accepted == MESSAGES:
            self.done()


def test_a_local_consumer_takes_every_message(chain: Mesh) -> None:
    scenario = run(Closest(chain, consumers_at=(0, 1, 2)), timeout=60)
    assert scenario.errors == []
    assert scenario.by_router == Counter({0: MESSAGES})


def test_without_a_local_consumer_the_nearest_router_takes_every_message(chain: Mesh) -> None:
    scenario = run(Closest(chain, consumers_at=(1, 2)), timeout=60)
    assert scenario.errors == []
    # router 1 is one hop from the producer, router 2 two (balanced: 30 and 30 here)
    assert scenario.by_router == Counter({1: MESSAGES})
