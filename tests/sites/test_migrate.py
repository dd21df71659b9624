"""A migration from a stack on this machine (the deployer) to the site of hosts, each step
as `enmesh migrate ... --to-inventory stacks/site.inventory.yml` runs it:

- plan reads the site's cluster over SSH (`rabbitmqctl` on a broker host);
- prepare gives the site the source's users' passwords and runs the site's playbook;
- bridge: the source's routers dial the site's over the site network, with a certificate
  the site's CA issued; producers and consumers then move from the source to the site
  one by one while sending (anycast end to end across the two meshes, a queue);
- move-stored: the source broker's shovels drain its backlog into the site's cluster;
- finish finds the source empty of messages and clients; the bridge is removed.

At the end every accepted anycast message was received exactly once, and the queue's
consumer on the site got the backlog and every message the producer had acknowledged.
"""

from __future__ import annotations

import os
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from enmesh.migrate.bridge import unbridge_side
from enmesh.migrate.bridge_site import bridge_to_site
from enmesh.migrate.finish import remaining
from enmesh.migrate.plan import make_plan
from enmesh.migrate.prepare import prepare_site
from enmesh.migrate.shovel import move_stored
from enmesh.migrate.site import Site, load_site, site_end
from tests.sites.conftest import INVENTORY, ROOT
from tests.support.apply_target import stack_file
from tests.support.mesh import Mesh, wait_until
from tests.support.migrate_ends import depth, side, stack_end, store
from tests.support.stack import brokered_mesh
from tests.support.switching import Consumer, Producer, move

BACKLOG = 200  # stored on the source before the migration


@dataclass
class SiteClients:
    """The site as clients reach it: its first router, over SCRAM (plain AMQP)."""

    deployment: dict[str, Any]
    passwords: dict[str, str]
    ca: Path

    def url(self, index: int, tls: bool = False) -> str:
        router = self.deployment["routers"][index]
        scheme = "amqps" if tls else "amqp"
        return f"{scheme}://{router['host']}:{router['ports'][scheme]}"


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    with brokered_mesh(tmp_path_factory.mktemp("source"), routers=1, name="source") as mesh:
        yield mesh


@pytest.fixture(scope="module")
def site(monkeypatch_module: pytest.MonkeyPatch) -> Site:
    # The project's Ansible configuration, whatever molecule's verifier set.
    monkeypatch_module.setenv("ANSIBLE_CONFIG", str(ROOT / "ansible.cfg"))
    monkeypatch_module.setenv("ANSIBLE_FORCE_COLOR", "0")
    monkeypatch_module.setenv("PATH", f"{ROOT / '.venv/bin'}:{os.environ['PATH']}")
    return load_site(INVENTORY, ROOT / "playbooks")


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def _prepared_and_bridged(source: Mesh, site: Site) -> SiteClients:
    """prepare, then bridge (twice: the second run keeps everything); the site as its
    clients reach it from then on."""
    prepared = step("prepare", lambda: prepare_site(stack_file(source), site))
    print(prepared.text())
    assert prepared.added == []  # the same model: only the passwords differ
    assert set(prepared.passwords) >= {"device@iot", "backend@iot"}
    bridged = step("bridge", lambda: bridge_to_site(side(source), site, echo=print))
    print(bridged.text())
    assert bridged.links == 3  # the source's router to each of the site's three
    again = bridge_to_site(side(source), site, echo=print)
    assert (again.certificate, again.links) == ("certificate kept", 3)
    # Clients change only the URL: the site now takes the source's passwords.
    return SiteClients(site.deployment(), dict(source.passwords), site.ca)


def _start(clients: list[Producer | Consumer]) -> None:
    for client in clients:  # consumers first: a direct address's producer needs one
        client.start()
        assert client.started.wait(60), f"{client.name} did not start"
        assert client.error is None, f"{client.name}: {client.error!r}"
    for producer in clients:
        if isinstance(producer, Producer):
            wait_until(lambda p=producer: len(p.sent) >= 20, 60, f"{producer.name} sending")


def _stop(clients: list[Producer | Consumer]) -> None:
    for client in clients:
        client.stop.set()
    for client in clients:
        client.join(60)
    assert [c.name for c in clients if c.error is not None] == []


def _move_stored(source: Mesh, site: Site) -> None:
    moved = step("move-stored", lambda: move_stored(stack_end("source", source), site_end(site)))
    assert {m.queue: m.moved for m in moved if m.source_before} == {"iot.events": BACKLOG}


def test_the_local_stack_moves_to_the_site_while_clients_work(source: Mesh, site: Site) -> None:
    run = uuid.uuid4().hex[:8]  # the site keeps what other checks sent: ours are marked
    stored = [f"migrate-{run}-stored-{n}" for n in range(BACKLOG)]
    store(source, "events", stored)
    wait_until(lambda: depth(source, "iot.events") == BACKLOG, 30, "the events backlog")
    plan = step("plan", lambda: make_plan(stack_end("source", source), site_end(site)))
    events = next(q for q in plan.queues if q.queue == "iot.events")
    assert (events.source_messages, events.target_broker) == (BACKLOG, "broker-0"), plan.text()
    on_site = _prepared_and_bridged(source, site)

    telemetry_in = Consumer("telemetry-in", "backend@iot", "telemetry", source)
    telemetry = Producer(f"telemetry-{run}", "device@iot", "telemetry", source)
    events_in = Consumer("events-in", "backend@iot", "events", on_site)
    events_out = Producer(f"events-{run}", "device@iot", "events", source)
    clients: list[Producer | Consumer] = [telemetry_in, events_in, telemetry, events_out]
    try:
        _start(clients)
        move(telemetry_in, on_site)  # the producer on the source reaches it across the bridge
        move(events_out, on_site)
        _move_stored(source, site)
        move(telemetry, on_site)
        for producer in (telemetry, events_out):
            producer.stop.set()
            producer.join(60)
        wanted_events = set(stored) | set(events_out.sent)
        wait_until(lambda: set(telemetry.sent) <= set(telemetry_in.got), 60, "all telemetry")
        wait_until(lambda: wanted_events <= set(events_in.got), 120, "all events")
    finally:
        _stop(clients)

    assert Counter(telemetry_in.got) == Counter(telemetry.sent)  # accepted once, got once
    ours = [b for b in events_in.got if b.startswith((f"migrate-{run}-", f"events-{run}-"))]
    duplicates = sum(n - 1 for n in Counter(ours).values())
    print(
        f"telemetry {len(telemetry.sent)} sent, {telemetry.sent_again} sent again; events "
        f"{len(events_out.sent)} sent + {BACKLOG} moved, {duplicates} duplicate(s)"
    )
    assert set(ours) == wanted_events

    left = remaining(stack_end("source", source), source.secrets_dir)
    assert left.empty, left.text("source")
    assert unbridge_side(side(source), "site", echo=print)  # `bridge --remove`
    router = source.routers[0]
    wait_until(lambda: router.reachable_routers() == 0, 30, "the source to leave the site's mesh")


T = TypeVar("T")


def step(name: str, run: Callable[[], T]) -> T:
    """Run one migration step and print how long it took."""
    started = time.monotonic()
    result = run()
    print(f"step {name}: {time.monotonic() - started:.1f} s")
    return result
