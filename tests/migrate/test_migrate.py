"""`enmesh migrate plan` and `move-stored` between two stacks on this machine: two meshes,
each with its own RabbitMQ node, PKI and secrets; messages sent and received through the
meshes with a real AMQP 1.0 client."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from proton import Timeout

from enmesh.migrate.ends import MigrateError
from enmesh.migrate.expiry import SPREAD_MS, read_expiries
from enmesh.migrate.plan import make_plan
from enmesh.migrate.shovel import MIGRATE_USER, PREFETCH, move_stored
from tests.router.conftest import account
from tests.support.fill import fill
from tests.support.mesh import ROOT, Mesh, wait_until
from tests.support.migrate_ends import depth, stack_end, store
from tests.support.rabbitmq import VHOST, RabbitMQBroker
from tests.support.stack import broker_attached, brokered_mesh

N = 500
QUEUE = "iot.events"


@pytest.fixture(scope="module")
def meshes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Mesh, Mesh]]:
    with ExitStack() as stack:
        source = stack.enter_context(brokered_mesh(tmp_path_factory.mktemp("source"), routers=1))
        target = stack.enter_context(brokered_mesh(tmp_path_factory.mktemp("target"), routers=1))
        yield source, target


def receive(mesh: Mesh, address: str, count: int) -> list[str]:
    connection = account(mesh, 0, "backend@iot").blocking(timeout=30)
    bodies = []
    try:
        receiver = connection.create_receiver(address, credit=100)
        for _ in range(count):
            message = receiver.receive(timeout=30)
            bodies.append(str(message.body))
            receiver.accept()
    finally:
        connection.close()
    return bodies


def test_plan_shows_stored_messages_and_model(meshes: tuple[Mesh, Mesh]) -> None:
    source, target = meshes
    store(source, "readings", ["r1", "r2", "r3"])
    wait_until(lambda: depth(source, "iot.readings") == 3, 30, "3 stored on the source")
    plan = make_plan(stack_end("source", source), stack_end("target", target))
    data = plan.as_json()
    rows = {q["queue"]: q for q in data["queues"]}
    assert rows["iot.readings"]["source_messages"] == 3
    assert rows["iot.readings"]["target_messages"] == 0
    assert rows["iot.readings"]["action"] == "move 3"
    assert rows["iot.readings"]["type"] == "queue"
    assert rows["iot.dlq"]["type"] == "deadletter"
    assert data["tenants"]["both"] == ["acme", "iot"]
    assert data["conflicts"] == []
    assert data["usersMissingOnTarget"] == []
    assert "iot.readings" in plan.text()
    assert plan.to_move == 3


def test_move_stored_moves_everything_once(meshes: tuple[Mesh, Mesh]) -> None:
    source, target = meshes
    bodies = [f"event {i}" for i in range(N)]
    store(source, "events", bodies)
    wait_until(lambda: depth(source, QUEUE) == N, 30, f"{N} stored on the source")
    src, dst = stack_end("source", source), stack_end("target", target)
    moved = {m.queue: m for m in move_stored(src, dst, timeout=120, progress=lambda _: None)}
    assert moved[QUEUE].moved == N
    assert moved[QUEUE].source_after == 0
    assert moved["iot.readings"].moved == 3  # from the plan test
    assert depth(source, QUEUE) == 0
    assert depth(target, QUEUE) == N
    assert sorted(receive(target, "events", N)) == sorted(bodies)
    # Accepted by the client: the target queue empties (quorum queue counts lag a little).
    wait_until(lambda: depth(target, QUEUE) == 0, 30, "target queue drained by the client")
    # The migration user is gone from both brokers; a second run moves nothing.
    for mesh in meshes:
        broker = mesh.extra["broker"]
        assert isinstance(broker, RabbitMQBroker)
        assert MIGRATE_USER not in broker.ctl("list_users").stdout
    again = move_stored(src, dst, timeout=60, progress=lambda _: None)
    assert all(m.moved == 0 for m in again)
    assert depth(target, "iot.readings") == 3


def test_move_stored_refuses_when_target_lacks_the_queue(meshes: tuple[Mesh, Mesh]) -> None:
    source, target = meshes
    store(source, "commands", ["c1"], identity="backend@iot")
    wait_until(lambda: depth(source, "iot.commands") == 1, 30, "1 stored on the source")
    broker = target.extra["broker"]
    assert isinstance(broker, RabbitMQBroker)
    broker.ctl("delete_queue", "-p", VHOST, "iot.commands")
    try:
        with pytest.raises(MigrateError, match=r"lacks queue.*iot.commands \(1\).*enmesh apply"):
            move_stored(stack_end("s", source), stack_end("t", target), progress=lambda _: None)
        assert depth(source, "iot.commands") == 1  # nothing moved
    finally:
        broker.ctl("import_definitions", str(broker.definitions))
        # RabbitMQ dropped the target router's broker connection when the queue went, and
        # ended the next one's autoLink session (not found) until it was back: the router
        # attaches them again by itself (tests/router/test_broker_session_end.py).
        wait_until(lambda: _attached(target), 60, "the target router's autoLinks")


def _attached(mesh: Mesh) -> bool:
    try:
        return all(broker_attached(router.metrics()) for router in mesh.routers)
    except OSError:  # its metrics listener is not up yet
        return False


MOVER = """
import json, sys
from enmesh.control.brokers import Rabbitmqctl
from enmesh.migrate.ends import end_from_deployment
from enmesh.migrate.shovel import move_stored
spec = json.load(open(sys.argv[1]))
ends = [
    end_from_deployment(
        e["name"], e["deployment"], {"broker-0": Rabbitmqctl("broker-0", e["argv"], e["env"])}
    )
    for e in (spec["source"], spec["target"])
]
move_stored(*ends, timeout=120, progress=lambda line: print(line, flush=True))
"""


def _mover(source: Mesh, target: Mesh, directory: Path) -> subprocess.Popen[str]:
    """move-stored in its own process (MOVER), printing its progress lines."""
    src, dst = stack_end("source", source), stack_end("target", target)
    spec = {
        side: {
            "name": end.name,
            "deployment": end.deployment,
            "argv": list(end.brokers[0].ctl.argv),
            "env": dict(end.brokers[0].ctl.env or {}),
        }
        for side, end in (("source", src), ("target", dst))
    }
    (directory / "ends.json").write_text(json.dumps(spec))
    return subprocess.Popen(
        [sys.executable, "-c", MOVER, str(directory / "ends.json")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def _until_partly_moved(mover: subprocess.Popen[str], count: int) -> None:
    """Read the mover's progress until its shovels have moved some messages, not all, or
    until it ends: on an idle machine the shovels can move everything before the mover's
    first progress line, and the interruption then comes after the move."""
    assert mover.stdout is not None
    for line in mover.stdout:
        left = re.match(r"  \d+ shovel\(s\) running, (\d+) message", line)
        if left and 0 < int(left[1]) < count:
            return


def _assert_moved_once_or_more(target: Mesh, address: str, bodies: list[str], what: str) -> None:
    got = receive_all(target, address, at_least=len(bodies))
    wanted = set(bodies)  # once: a set per received message made this check quadratic
    received = [b for b in got if b in wanted]
    assert set(received) == wanted, f"every stored message reached the target ({what})"
    # At-least-once: a message confirmed by the target but not yet acknowledged on the
    # source when its shovel was stopped is moved again; never more than one prefetch.
    duplicates = len(received) - len(bodies)
    print(f"duplicates after {what}: {duplicates}")
    assert 0 <= duplicates <= PREFETCH


def test_move_stored_killed_and_run_again_loses_nothing(
    meshes: tuple[Mesh, Mesh], tmp_path: Path
) -> None:
    """SIGKILL the mover while its shovels run (part of 50,000 messages moved), run it
    again: it removes the shovels still running and moves the rest; every message arrives."""
    source, target = meshes
    count = 50_000
    bodies = [f"reading {i}" for i in range(count)]
    fill(account(source, 0, "device@iot").options(), "readings", bodies)
    wait_until(lambda: depth(source, "iot.readings") == count, 60, "stored on the source")
    mover = _mover(source, target, tmp_path)
    try:
        _until_partly_moved(mover, count)
        mover.send_signal(signal.SIGKILL)
        print(f"killed with about {depth(source, 'iot.readings')} of {count} on the source")
    finally:
        mover.kill()
        mover.wait(timeout=30)
    src, dst = stack_end("source", source), stack_end("target", target)
    moved = move_stored(src, dst, timeout=120, progress=print)
    assert {m.queue: m.source_after for m in moved}["iot.readings"] == 0
    _assert_moved_once_or_more(target, "readings", bodies, "SIGKILL and resume")
    broker = source.extra["broker"]
    assert isinstance(broker, RabbitMQBroker)
    assert MIGRATE_USER not in broker.ctl("list_users").stdout


def test_move_stored_through_a_target_broker_power_cut_loses_nothing(
    meshes: tuple[Mesh, Mesh], tmp_path: Path
) -> None:
    """The target's broker host loses power (SIGKILL, no clean shutdown) in the middle of
    moving 60,000 messages and comes back: the shovels reconnect, or move-stored stops
    with the reason and running it again moves the rest. What the target confirmed
    before it went survives there (durable queues, persistent messages); every message
    arrives."""
    source, target = meshes
    count = 60_000  # about 8 s of shovelling here: long enough to be cut in the middle
    bodies = [f"event {i}" for i in range(count)]
    fill(account(source, 0, "device@iot").options(), "events", bodies)
    wait_until(lambda: depth(source, QUEUE) == count, 60, "stored on the source")
    broker = target.extra["broker"]
    assert isinstance(broker, RabbitMQBroker)
    mover = _mover(source, target, tmp_path)
    try:
        _until_partly_moved(mover, count)
        broker.power_off()
        left = depth(source, QUEUE)
        print(f"target broker powered off with {left} of {count} on the source")
        broker.start()
        output, _ = mover.communicate(timeout=300)
    finally:
        mover.kill()
    print(f"mover ended with {mover.returncode}: {output.strip().splitlines()[-1:]}")
    if mover.returncode != 0:  # stopped with its reason; the same command resumes
        assert "shovel" in output or "broker" in output, output[-2000:]
        moved = move_stored(
            stack_end("source", source), stack_end("target", target), timeout=180, progress=print
        )
        assert {m.queue: m.source_after for m in moved}[QUEUE] == 0
    assert depth(source, QUEUE) == 0
    wait_until(
        lambda: broker_attached(target.routers[0].metrics()), 60, "the target router's broker link"
    )
    _assert_moved_once_or_more(target, "events", bodies, "a target broker power cut")


def receive_all(mesh: Mesh, address: str, at_least: int = 0) -> list[str]:
    """Receive `at_least` messages (30 s for each), then on until the address stays quiet
    for 3 s (duplicates would come then). The first may wait for the target router's
    link to its broker, which a loaded machine can take seconds to attach."""
    connection = account(mesh, 0, "backend@iot").blocking(timeout=30)
    bodies: list[str] = []
    try:
        receiver = connection.create_receiver(address, credit=200)
        while True:
            try:
                message = receiver.receive(timeout=30 if len(bodies) < at_least else 3)
            except Timeout:
                return bodies
            bodies.append(str(message.body))
            receiver.accept()
    finally:
        connection.close()


def test_moved_messages_expire_when_they_would_have_on_the_source(
    meshes: tuple[Mesh, Mesh],
) -> None:
    """`acme/orders` keeps a message an hour. Messages stored on the source and moved at
    least 10 s later expire on the target when they would have on the source: each one's
    expiry as the target's queue recorded it (its absolute time, read from the queue's
    state) is its expiry on the source, within a run's spread (1 s) earlier or the time
    the shovel took to carry it later; a restarted TTL would be 10 s or more later."""
    source, target = meshes
    count, aged = 300, 10.0
    store(source, "orders", [f"order {i}" for i in range(count)], identity="app@acme")
    wait_until(lambda: depth(source, "acme.orders") == count, 30, "stored on the source")
    src, dst = stack_end("source", source), stack_end("target", target)
    before = read_expiries(src.brokers[0].ctl, VHOST, "acme.orders").expiry
    assert len(before) == count and None not in before
    time.sleep(aged)  # the messages age on the source: not waiting for any readiness
    moved = move_stored(src, dst, progress=print)
    assert {m.queue: m.moved for m in moved}["acme.orders"] == count
    after = read_expiries(dst.brokers[0].ctl, VHOST, "acme.orders").expiry[-count:]
    shift = [a - b for a, b in zip(after, before, strict=True) if a is not None and b is not None]
    print(f"expiry on the target minus on the source: {min(shift)} to {max(shift)} ms")
    assert len(shift) == count
    assert min(shift) >= -SPREAD_MS and max(shift) < 1000 * aged / 2
