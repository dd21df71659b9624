"""Config reload (SIGHUP) on a running 3-router mesh with RabbitMQ, clients under load.

The model gains a tenant with an anycast and a queue address and a user; the stack is
recompiled into the routers' config directory and each router is sent SIGHUP, as
`enmesh apply` does. The new addresses carry messages at once; the clients under load
lose no connection and get no delivery released. A config that does not load changes
nothing and is logged with its file and line. Removing the address and the user closes
that user's connection only.
"""

from __future__ import annotations

import functools
import hashlib
import re
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from proton import Message

from enmesh.compile import compile_model, load_stack, write_artefacts
from enmesh.model import load_model
from tests.router.conftest import account
from tests.support.amqp import Scenario, run
from tests.support.mesh import Mesh, RouterProcess, wait_until
from tests.support.rabbitmq import RabbitMQBroker
from tests.support.sasl import make_sasldb
from tests.support.stack import brokered_mesh

OUTCOME_WAIT_SECONDS = 10.0  # for outcomes still in flight when the load stops

NEW_TENANT = """
---
apiVersion: enmesh.io/v1
kind: AddressSpace
metadata: {name: newco}
spec: {type: standard, plan: standard-small}
---
apiVersion: enmesh.io/v1
kind: Address
metadata: {name: newco.jobs}
spec: {addressSpace: newco, address: jobs, type: queue, plan: standard-queue}
"""
NEW_ANYCAST = """
---
apiVersion: enmesh.io/v1
kind: Address
metadata: {name: newco.news}
spec: {addressSpace: newco, address: news, type: anycast, plan: standard-anycast}
"""
NEW_USER = """
---
apiVersion: enmesh.io/v1
kind: MessagingUser
metadata: {name: newco.worker}
spec:
  addressSpace: newco
  username: worker
  authentication:
    passwordSecret: {name: newco-worker, key: password}
  authorization:
    - operations: [send, recv]
      addresses: [news, jobs]
"""
WORKER = "worker@newco"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    with brokered_mesh(tmp_path_factory.mktemp("reload"), routers=3) as mesh:
        yield mesh


def _metric(router: RouterProcess, pattern: str) -> str | None:
    found = re.search(pattern, router.metrics(), re.M)
    return found[1] if found else None


def _reloads(router: RouterProcess, result: str) -> int:
    return int(_metric(router, rf'config_reloads_total\{{[^}}]*result="{result}"\}} (\d+)') or 0)


def _running_sha(router: RouterProcess) -> str | None:
    return _metric(router, r'enmesh_router_config_info\{[^}]*?[{,]sha256="([0-9a-f]+)"')


def recompile(mesh: Mesh, extra: str) -> None:
    """The sample model plus `extra`, compiled into the running stack's config directory;
    the broker gets the new definitions, the SASL database the new user's password."""
    model = mesh.directory / "iot.model.yml"
    original = mesh.extra.setdefault("model", model.read_text())
    model.write_text(str(original) + extra)
    stack, files = load_stack(mesh.directory / "test.stack.yml")
    write_artefacts(compile_model(stack, load_model(files)), mesh.directory / "config")
    if WORKER in mesh.passwords and "newco.worker" in extra:
        mesh.set_secret("newco-worker", "password", mesh.passwords[WORKER])
    make_sasldb(mesh.directory / "state" / "auth" / "enmesh.sasldb", mesh.passwords)
    broker: RabbitMQBroker = mesh.extra["broker"]  # type: ignore[assignment]
    broker.ctl(
        "import_definitions", str(mesh.directory / "config/brokers/broker-0.definitions.json")
    )


def reload_all(mesh: Mesh) -> float:
    """SIGHUP every router, wait until each runs its file; the time that took."""
    started = time.monotonic()
    before = [_reloads(r, "ok") for r in mesh.routers]
    for router in mesh.routers:
        assert router.process is not None
        router.process.send_signal(signal.SIGHUP)
    for router, count in zip(mesh.routers, before, strict=True):
        digest = hashlib.sha256(router.config.read_bytes()).hexdigest()
        wait_until(
            functools.partial(_runs, router, count, digest), 15, f"router {router.index} to reload"
        )
    return time.monotonic() - started


def _runs(router: RouterProcess, reloads_before: int, digest: str) -> bool:
    return _reloads(router, "ok") > reloads_before and _running_sha(router) == digest


class Load(Scenario):
    """device@iot sends `telemetry` on router 0 (unsettled) every few ms, backend@iot
    consumes on router 2, acme's app idles on router 1: counts outcomes and closes."""

    def __init__(self, mesh: Mesh, stop: threading.Event) -> None:
        super().__init__()
        self.mesh, self.stop = mesh, stop
        self.sender: Any = None
        self.sent = self.accepted = self.released = self.received = self.closed = 0
        self.ready = threading.Event()
        self.stopping_since = 0.0

    def on_start(self, event: Any) -> None:
        consumer = self.open(account(self.mesh, 2, "backend@iot"))
        event.container.create_receiver(consumer, "telemetry", name="consumer")
        self.open(account(self.mesh, 1, "app@acme"))
        event.container.schedule(0.01, self)

    def on_link_opened(self, event: Any) -> None:
        if event.link.name == "consumer":
            producer = self.open(account(self.mesh, 0, "device@iot"))
            self.sender = event.container.create_sender(producer, "telemetry", name="producer")

    def on_timer_task(self, event: Any) -> None:
        if self.stop.is_set():
            # Stop sending, but close only once the outcomes in flight are back (they are
            # what the test counts), or after a bounded wait for them.
            if not self.stopping_since:
                self.stopping_since = time.monotonic()
            settled = self.accepted + self.released >= self.sent
            if settled or time.monotonic() - self.stopping_since > OUTCOME_WAIT_SECONDS:
                self.done()
            else:
                event.container.schedule(0.01, self)
            return
        if self.sender is not None and self.sender.credit > 0:
            self.sender.send(Message(body=self.sent))
            self.sent += 1
            if self.sent >= 20:
                self.ready.set()
        event.container.schedule(0.005, self)

    def on_message(self, event: Any) -> None:
        self.received += 1

    def on_accepted(self, event: Any) -> None:
        self.accepted += 1

    def on_released(self, event: Any) -> None:  # released and modified alike
        self.released += 1

    def on_connection_remote_close(self, event: Any) -> None:
        if not self.stop.is_set():  # after stop: the router answering our own close
            self.closed += 1

    def on_disconnected(self, event: Any) -> None:
        if not self.stop.is_set():
            self.closed += 1


class FirstMessage(Scenario):
    """A receiver on router 2 and a sender on router 1 for `address`, as `identity`."""

    def __init__(self, mesh: Mesh, identity: str, address: str) -> None:
        super().__init__()
        self.mesh, self.identity, self.address = mesh, identity, address
        self.body: Any = None
        self.sent = False

    def on_start(self, event: Any) -> None:
        receiving = self.open(account(self.mesh, 2, self.identity))
        event.container.create_receiver(receiving, self.address, name="in")

    def on_link_opened(self, event: Any) -> None:
        if event.link.name == "in":
            sending = self.open(account(self.mesh, 1, self.identity))
            event.container.create_sender(sending, self.address, name="out")

    def on_sendable(self, event: Any) -> None:
        if not self.sent:
            self.sent = True
            event.sender.send(Message(body=f"first on {self.address}"))

    def on_message(self, event: Any) -> None:
        self.body = event.message.body
        self.done()


class Idle(Scenario):
    """One connection as `identity` on router 0 with a receiver; records how it ended."""

    def __init__(self, mesh: Mesh, identity: str, address: str, opened: threading.Event) -> None:
        super().__init__()
        self.mesh, self.identity, self.address, self.opened = mesh, identity, address, opened
        self.condition: str | None = None

    def on_start(self, event: Any) -> None:
        conn = self.open(account(self.mesh, 0, self.identity))
        event.container.create_receiver(conn, self.address)

    def on_link_opened(self, event: Any) -> None:
        self.opened.set()

    def on_connection_remote_close(self, event: Any) -> None:
        condition = event.connection.remote_condition
        self.condition = condition.name if condition else "none"
        self.done()


def _in_thread(scenario: Scenario, timeout: float) -> threading.Thread:
    thread = threading.Thread(target=run, args=(scenario, timeout), daemon=True)
    thread.start()
    return thread


def test_reload_adds_and_removes_a_tenant_live(stack: Mesh) -> None:
    stop = threading.Event()
    load = Load(stack, stop)
    load_thread = _in_thread(load, 240)
    try:
        assert load.ready.wait(30), load.errors
        stack.passwords[WORKER] = "worker-secret-1"
        recompile(stack, NEW_TENANT + NEW_ANYCAST + NEW_USER)
        took = reload_all(stack)
        started = time.monotonic()
        news = FirstMessage(stack, WORKER, "news")
        run(news, timeout=30)
        first_message = time.monotonic() - started
        jobs = FirstMessage(stack, WORKER, "jobs")
        run(jobs, timeout=30)
        print(f"reload of 3 routers: {took:.2f} s; first message on news {first_message:.2f} s")
        assert news.body == "first on news" and jobs.body == "first on jobs"
        assert load.closed == 0 and load.released == 0, load.errors

        # A config that does not load: nothing changes, the log names file and line.
        router = stack.routers[0]
        good = router.config.read_text()
        running = _running_sha(router)
        router.config.write_text(good + "\naddress {\n    prefix: x\n    colour: red\n}\n")
        line = len(good.splitlines()) + 4
        assert router.process is not None
        router.process.send_signal(signal.SIGHUP)
        wait_until(lambda: _reloads(router, "failed") == 1, 15, "the bad reload")
        assert (
            f"{router.config}:{line}: address 'x': unknown attribute 'colour'" in router.log_tail()
        )
        assert _running_sha(router) == running
        router.config.write_text(good)

        # The user and the anycast address go: the user's connection closes, nobody else's.
        opened = threading.Event()
        worker = Idle(stack, WORKER, "jobs", opened)
        worker_thread = _in_thread(worker, 60)
        assert opened.wait(20), worker.errors
        recompile(stack, NEW_TENANT)
        reload_all(stack)
        worker_thread.join(30)
        assert worker.condition == "amqp:unauthorized-access"
    finally:
        stop.set()
        load_thread.join(30)
    assert load.errors == [] and load.closed == 0
    assert load.released == 0 and load.accepted == load.sent and load.sent > 100
