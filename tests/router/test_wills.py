"""Wills of AMQP clients (`$lwt`) on a real 2-router mesh, clients in their own processes.

The sample model: spaces `iot` and `acme` both have an anycast address `telemetry`;
`device@iot` may send to it (and only receive from `commands`), `backend@iot` and
`app@acme` consume it on router 1, while wills are registered on router 0, so a published
will crosses the mesh. A will that must not
be published is shown absent by a marker sent after its client ended, from the same
router on the same path: the consumer's next message is the marker.
"""

from __future__ import annotations

import json
import re
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from proton import Message
from proton.reactor import AtMostOnce
from proton.utils import BlockingConnection, BlockingReceiver

from tests.support.amqp import Account, Scenario, run
from tests.support.mesh import Mesh, build_mesh, wait_until

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    directory = tmp_path_factory.mktemp("wills")
    built = build_mesh(directory / "mesh", routers=2)  # the sample model
    for router in built.routers:
        router.options = ("--will-store", str(directory / f"wills-{router.index}.sqlite3"))
    try:
        built.start()
        built.wait_converged()
        yield built
    finally:
        built.stop()


def account(mesh: Mesh, router: int, user: str) -> Account:
    identity = user
    return Account(mesh.url(router), identity, mesh.passwords[identity], user.split("@")[1])


class Consumer:
    """A receiver of `telemetry` on router 1, open for the whole test."""

    def __init__(self, mesh: Mesh, user: str) -> None:
        self.connection: BlockingConnection = account(mesh, 1, user).blocking(timeout=90)
        self.receiver: BlockingReceiver = self.connection.create_receiver("telemetry", credit=10)

    def next(self, timeout: float = 60) -> Message:
        message = self.receiver.receive(timeout=timeout)
        if self.receiver.fetcher.unsettled:  # wills come unsettled, markers presettled
            self.receiver.accept()
        return message

    def pump(self) -> None:
        """One round of this connection's I/O: a blocking connection sends its
        dispositions (the accept) only while something waits on it."""
        container = self.connection.container
        saved, container.timeout = container.timeout, 0.05
        try:
            container.process()
        finally:
            container.timeout = saved

    def close(self) -> None:
        self.connection.close()


@pytest.fixture
def watcher(mesh: Mesh) -> Iterator[Consumer]:
    consumer = Consumer(mesh, "backend@iot")
    yield consumer
    consumer.close()


class WillClient:
    """tests/support/will_client.py in its own process, its wills accepted by router 0."""

    def __init__(self, mesh: Mesh, wills: list[dict[str, Any]], user: str = "device@iot") -> None:
        spec = {
            "url": mesh.url(0),
            "user": user,
            "password": mesh.passwords[user],
            "vhost": user.split("@")[1],
            "wills": wills,
        }
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.will_client", json.dumps(spec)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline().strip()
        assert line == "registered", self.process.communicate(timeout=10)[1]

    def end(self, action: str) -> None:
        """`kill` (SIGKILL), or `detach` / `close` as the client chooses to end."""
        if action == "kill":
            self.process.kill()
            self.process.wait(10)
            return
        out, err = self.process.communicate(f"{action}\n", timeout=30)
        assert self.process.returncode == 0 and out.strip() == "ended", err


def send(mesh: Mesh, user: str, body: str) -> None:
    """A marker on router 0 (the wills' router) to `telemetry`, once a consumer has it.

    Presettled: the consumer's blocking connection turns only in its own calls, so this
    one cannot wait for its outcome."""
    connection = account(mesh, 0, user).blocking(timeout=30)
    try:
        connection.create_sender("telemetry", options=AtMostOnce()).send(Message(body=body))
    finally:
        connection.close()


def wait_published(mesh: Mesh, consumer: Consumer) -> None:
    """The consumer accepted the will: the router forgets it."""

    def forgotten() -> bool:
        consumer.pump()
        return stored_wills(mesh) == 0

    wait_until(forgotten, 10, "the published will to leave the store")


def wills_published(mesh: Mesh) -> int:
    found = re.search(
        r'^enmesh_router_wills_total\{[^}]*result="published"\} (\d+)$',
        mesh.routers[0].metrics(),
        re.M,
    )
    assert found is not None
    return int(found[1])


def stored_wills(mesh: Mesh) -> int:
    path = mesh.routers[0].options[1]
    with sqlite3.connect(path) as db:
        return int(db.execute("SELECT count(*) FROM wills").fetchone()[0])


WILL = {"to": "telemetry", "body": "app-7 is gone", "properties": {"device": "app-7"}}


@pytest.mark.parametrize("ending", ["kill", "close"])
def test_a_will_is_published_when_the_connection_ends_with_its_link_attached(
    mesh: Mesh, watcher: Consumer, ending: str
) -> None:
    published_before = wills_published(mesh)
    client = WillClient(mesh, [WILL])
    assert stored_wills(mesh) == 1
    assert re.search(
        r'^enmesh_router_wills\{router="[^"]+",state="registered"\} 1$',
        mesh.routers[0].metrics(),
        re.M,
    )
    client.end(ending)
    will = watcher.next()
    assert (will.body, will.properties, will.address) == (
        "app-7 is gone",
        {"device": "app-7"},
        "telemetry",
    )
    wait_published(mesh, watcher)
    assert wills_published(mesh) == published_before + 1
    assert re.search(
        r'^enmesh_router_wills\{router="[^"]+",state="registered"\} 0$',
        mesh.routers[0].metrics(),
        re.M,
    )


def test_a_detached_will_link_cancels_the_will(mesh: Mesh, watcher: Consumer) -> None:
    client = WillClient(mesh, [WILL])
    client.end("detach")
    send(mesh, "device@iot", "marker")
    assert watcher.next().body == "marker"
    assert stored_wills(mesh) == 0


def test_a_second_will_on_the_link_replaces_the_first(mesh: Mesh, watcher: Consumer) -> None:
    client = WillClient(mesh, [WILL, {"to": "telemetry", "body": "second"}])
    assert stored_wills(mesh) == 1
    client.end("kill")
    assert watcher.next().body == "second"
    send(mesh, "device@iot", "marker")
    assert watcher.next().body == "marker"
    wait_published(mesh, watcher)


def test_a_will_stays_in_its_clients_address_space(mesh: Mesh, watcher: Consumer) -> None:
    other = Consumer(mesh, "app@acme")
    try:
        WillClient(mesh, [WILL]).end("kill")
        assert watcher.next().body == "app-7 is gone"
        wait_published(mesh, watcher)
        send(mesh, "app@acme", "acme marker")
        assert other.next().body == "acme marker"
    finally:
        other.close()


class Register(Scenario):
    """Send one will on `$lwt` and keep its outcome and condition."""

    def __init__(self, mesh: Mesh, message: Message) -> None:
        super().__init__()
        self.mesh, self.message = mesh, message
        self.outcome: tuple[str, str | None, str | None] | None = None

    def on_start(self, event: Any) -> None:
        event.container.create_sender(self.open(account(self.mesh, 0, "device@iot")), "$lwt")

    def on_sendable(self, event: Any) -> None:
        if self.outcome is None and not getattr(self, "sent", False):
            self.sent = True
            event.sender.send(self.message)

    def _settled(self, event: Any, outcome: str) -> None:
        condition = event.delivery.remote.condition
        self.outcome = (
            outcome,
            condition.name if condition else None,
            condition.description if condition else None,
        )
        self.done()

    def on_accepted(self, event: Any) -> None:
        self._settled(event, "accepted")

    def on_rejected(self, event: Any) -> None:
        self._settled(event, "rejected")


@pytest.mark.parametrize(
    ("to", "condition"),
    [
        ("commands", "amqp:unauthorized-access"),  # the user may receive from it, not send
        (None, "amqp:precondition-failed"),
        ("$lwt", "amqp:not-allowed"),
    ],
)
def test_a_will_its_client_could_not_send_is_rejected(
    mesh: Mesh, to: str | None, condition: str
) -> None:
    scenario = run(Register(mesh, Message(address=to, body="never")), timeout=30)
    assert scenario.outcome is not None
    assert scenario.outcome[:2] == ("rejected", condition), scenario.outcome
    assert stored_wills(mesh) == 0


class ReceiveFromWills(Scenario):
    def __init__(self, mesh: Mesh) -> None:
        super().__init__()
        self.mesh = mesh
        self.refusal: str | None = None

    def on_start(self, event: Any) -> None:
        event.container.create_receiver(self.open(account(self.mesh, 0, "device@iot")), "$lwt")

    def on_link_error(self, event: Any) -> None:
        self.refusal = event.link.remote_condition.name
        self.done()


def test_nobody_receives_from_the_will_address(mesh: Mesh) -> None:
    assert run(ReceiveFromWills(mesh), timeout=30).refusal == "amqp:not-allowed"


def _metric(mesh: Mesh, pattern: str) -> int:
    found = re.search(pattern, mesh.routers[0].metrics(), re.M)
    return int(found[1]) if found else 0


def _reload_router_0(mesh: Mesh) -> None:
    ok = r'^enmesh_router_config_reloads_total\{[^}]*result="ok"\} (\d+)$'
    before = _metric(mesh, ok)
    process = mesh.routers[0].process
    assert process is not None
    process.send_signal(signal.SIGHUP)
    wait_until(lambda: _metric(mesh, ok) > before, 15, "router 0 to reload")


def test_a_will_goes_out_only_with_the_rights_its_user_has_then(
    mesh: Mesh, watcher: Consumer
) -> None:
    """A reload takes `telemetry` from device@iot's targets while its will to it is
    registered: when the client dies, the will is dropped, not published."""
    policy = mesh.directory / "config" / "auth" / "policies" / "iot.json"
    original = policy.read_text()
    dropped = r'^enmesh_router_wills_total\{[^}]*result="dropped"\} (\d+)$'
    client = WillClient(mesh, [WILL])
    try:
        policy.write_text(original.replace('"events, readings, telemetry,', '"events, readings,'))
        _reload_router_0(mesh)
        before = _metric(mesh, dropped)
        client.end("kill")
        wait_until(lambda: _metric(mesh, dropped) > before, 15, "the will to be dropped")
    finally:
        policy.write_text(original)
        _reload_router_0(mesh)
    assert stored_wills(mesh) == 0
    send(mesh, "device@iot", "marker")
    assert watcher.next().body == "marker"


def test_a_will_outlives_its_router(mesh: Mesh, watcher: Consumer) -> None:
    """Router 0 killed with the client's link attached: its will is published when it
    starts again (the connection ended with the process). Last here: it restarts router 0."""
    client = WillClient(mesh, [{"to": "telemetry", "body": "lost with router 0"}])
    mesh.routers[0].kill()
    client.end("kill")
    assert stored_wills(mesh) == 1
    mesh.routers[0].start()
    mesh.wait_converged()
    assert watcher.next().body == "lost with router 0"
    wait_published(mesh, watcher)
