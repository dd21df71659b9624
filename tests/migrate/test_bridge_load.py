"""A migration under load: producers and consumers on anycast, multicast, queue, topic and
subscription addresses keep sending and receiving while they switch from the source
stack to the target one by one, across `enmesh migrate bridge`, `move-stored` and
`finish`. At the end:

- anycast, multicast: every message a consumer accepted was received once, none lost;
- queue: exactly the sent set (with the backlog stored before the migration); duplicates
  counted and reported;
- subscription: every message published to its topic, the backlog included;
- topic (not durable): what the subscriber got while attached, never twice, and it gets
  messages again after its switch;
- the source holds no messages and no clients (finish says it can be removed).

Clients are python-qpid-proton blocking clients, each in its own thread: a producer's
`send` returns when the far end accepted the message (a consumer for direct addresses, the
broker for stored ones) and raises on any other outcome, and the message is sent again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest

from enmesh.migrate.bridge import bridge
from enmesh.migrate.finish import remaining
from enmesh.migrate.shovel import move_stored
from tests.support.mesh import Mesh, wait_until
from tests.support.migrate_ends import ca_key, depth, side, source_and_target, stack_end, store
from tests.support.switching import Consumer, Producer, move

BACKLOG = 50  # stored on the source before the migration: events, and alerts for audit


@pytest.fixture(scope="module")
def meshes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Mesh, Mesh]]:
    factory = tmp_path_factory
    with source_and_target(factory.mktemp("source"), factory.mktemp("target")) as both:
        yield both


def test_clients_switch_one_by_one_while_sending_and_nothing_is_lost(
    meshes: tuple[Mesh, Mesh],
) -> None:
    source, target = meshes
    stored_events = [f"events-stored-{n}" for n in range(BACKLOG)]
    stored_alerts = [f"alerts-stored-{n}" for n in range(BACKLOG)]
    store(source, "events", stored_events)
    store(
        source, "alerts", stored_alerts, identity="backend@iot"
    )  # the audit subscription keeps them
    wait_until(lambda: depth(source, "iot.events") == BACKLOG, 30, "the events backlog")
    wait_until(lambda: depth(source, "iot.audit") == BACKLOG, 30, "the audit backlog")
    bridge(side(source), side(target), ca_key=ca_key(source), echo=print)

    consumers = {
        "telemetry": Consumer("telemetry-in", "backend@iot", "telemetry", source),
        "broadcast": Consumer("broadcast-in", "device@iot", "broadcast", source),
        "events": Consumer("events-in", "backend@iot", "events", source),
        "alerts": Consumer("alerts-in", "backend@iot", "alerts", source),
        "audit": Consumer("audit-in", "backend@iot", "alerts::audit", source),
    }
    producers = {
        "telemetry": Producer("telemetry", "device@iot", "telemetry", source),
        "broadcast": Producer("broadcast", "backend@iot", "broadcast", source),
        "events": Producer("events", "device@iot", "events", source),
        "alerts": Producer("alerts", "backend@iot", "alerts", source),
    }
    clients = [*consumers.values(), *producers.values()]
    try:
        for client in clients:  # consumers first: producers of direct addresses need one
            client.start()
            assert client.started.wait(60), f"{client.name} did not start"
            assert client.error is None, f"{client.name}: {client.error!r}"
        for producer in producers.values():
            wait_until(lambda p=producer: len(p.sent) >= 20, 60, f"{producer.name} sending")

        for client in (consumers["telemetry"], producers["telemetry"], producers["events"]):
            move(client, target)
        moved = move_stored(stack_end("source", source), stack_end("target", target))
        assert {m.queue: m.moved for m in moved if m.source_before} == {
            "iot.events": BACKLOG,
            "iot.audit": BACKLOG,
        }
        for client in (
            consumers["events"],
            producers["broadcast"],
            consumers["broadcast"],
            consumers["audit"],
            consumers["alerts"],
            producers["alerts"],
        ):
            move(client, target)

        for producer in producers.values():
            producer.stop.set()
            producer.join(60)
        expected = {
            "telemetry": producers["telemetry"].sent,
            "broadcast": producers["broadcast"].sent,
            "events": stored_events + producers["events"].sent,
            "audit": stored_alerts + producers["alerts"].sent,
        }
        for name, wanted in expected.items():
            wait_until(
                lambda c=consumers[name], w=set(wanted): w <= set(c.got), 60, f"all of {name}"
            )
    finally:
        for client in clients:
            client.stop.set()
        for client in clients:
            client.join(60)
    assert [c.name for c in clients if c.error is not None] == []

    duplicates = {}
    for name, wanted in expected.items():
        got = consumers[name].got
        assert set(got) == set(wanted), f"{name}: lost {sorted(set(wanted) - set(got))[:5]}"
        duplicates[name] = sum(n - 1 for n in Counter(got).values())
    print(
        "sent:", {n: len(p.sent) for n, p in producers.items()},
        "sent again:", {n: p.sent_again for n, p in producers.items()},
        "duplicates:", duplicates,
    )  # fmt: skip
    assert duplicates["telemetry"] == duplicates["broadcast"] == 0  # accepted once, got once
    topic = consumers["alerts"].got
    assert len(topic) == len(set(topic)) and set(topic) <= set(producers["alerts"].sent)
    assert producers["alerts"].sent[-1] in topic  # it got messages again after its move

    left = remaining(stack_end("source", source), source.secrets_dir)
    assert left.empty, left.text("source")
