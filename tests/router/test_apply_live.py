"""`enmesh apply` on a running 3-router mesh + RabbitMQ with clients under load.

The routers run as plain processes (SIGHUP to their pids); the broker is a private
RabbitMQ node. Every test writes the model it wants into the stack's model file and
applies it, so each stands alone on the shared stack.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from proton import ConnectionException, Message

from enmesh.control.apply import ApplyRefused, Result, apply_stack, installed_files
from enmesh.model import ModelInvalidError
from tests.support.amqp import Account
from tests.support.apply_target import (
    SHOP,
    SHOP_INVOICES,
    SHOP_SPACE,
    mesh_target,
    model_file,
    stack_file,
)
from tests.support.load import Flow, Load
from tests.support.mesh import SAMPLE_MODEL, Mesh, wait_until
from tests.support.rabbitmq import RabbitMQBroker
from tests.support.stack import brokered_mesh

SAMPLE = SAMPLE_MODEL.read_text()


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    with brokered_mesh(tmp_path_factory.mktemp("apply"), routers=3) as mesh:
        yield mesh


def _broker(mesh: Mesh) -> RabbitMQBroker:
    broker = mesh.extra["broker"]
    assert isinstance(broker, RabbitMQBroker)
    return broker


def _apply(mesh: Mesh, model: str, **options: object) -> Result:
    model_file(mesh).write_text(model)
    target = mesh_target(mesh, _broker(mesh))
    return apply_stack(stack_file(mesh), target, **options)  # type: ignore[arg-type]


def _password(mesh: Mesh, secret: str) -> str:
    return (mesh.secrets_dir / secret / "password").read_text().strip()


def _account(mesh: Mesh, router: int, identity: str, password: str | None = None) -> Account:
    secret = identity.replace("@", "-").split("-")
    password = (
        password or mesh.passwords.get(identity) or _password(mesh, f"{secret[1]}-{secret[0]}")
    )
    return Account(mesh.url(router), identity, password, identity.split("@", 1)[1])


def _depth(mesh: Mesh, queue: str) -> int | None:
    rows = {row["name"]: int(row["messages"]) for row in _broker(mesh).list_queues()}
    return rows.get(queue)


def _send(account: Account, address: str, count: int) -> None:
    connection = account.blocking()
    try:
        sender = connection.create_sender(address)
        for n in range(count):
            sender.send(Message(body=f"m{n}"))
    finally:
        connection.close()


def _receive(account: Account, address: str, count: int) -> list[object]:
    connection = account.blocking(timeout=15)
    try:
        receiver = connection.create_receiver(address, credit=count)
        bodies: list[object] = []
        for _ in range(count):
            message = receiver.receive(timeout=15)
            bodies.append(message.body)
            receiver.accept()
        return bodies
    finally:
        connection.close()


def _receive_in_background(account: Account, address: str) -> Future[object]:
    """One message, received on a thread of its own (a blocking sender in this thread
    waits for the receiver to settle); returns once the receiver is attached."""
    attached = threading.Event()

    def receive() -> object:
        connection = account.blocking(timeout=20)
        try:
            receiver = connection.create_receiver(address, credit=1)
            attached.set()
            body = receiver.receive(timeout=20).body
            receiver.accept()
            return body
        finally:
            attached.set()
            connection.close()

    future: Future[object] = ThreadPoolExecutor(1).submit(receive)
    attached.wait(20)
    return future


def _router_pids(mesh: Mesh) -> list[int]:
    return [r.process.pid for r in mesh.routers if r.process is not None]


def _iot_load(mesh: Mesh) -> Load:
    device, backend = "device@iot", "backend@iot"
    return Load(
        [
            Flow(_account(mesh, 0, device), "telemetry", send=True),
            Flow(_account(mesh, 2, backend), "telemetry", send=False),
            Flow(_account(mesh, 1, device), "events", send=True),
            Flow(_account(mesh, 0, backend), "events", send=False),
        ],
        interval=0.01,
    )


WITHOUT_ORDERS = SHOP_SPACE + SHOP_INVOICES  # and without the user


def test_apply_adds_a_tenant_live_and_removes_only_what_it_must(live: Mesh) -> None:
    _apply(live, SAMPLE)  # the stack as deployed
    pids = _router_pids(live)
    load = _iot_load(live)
    load.start()
    try:
        result = _apply(live, SAMPLE + SHOP)
        applied = time.monotonic()
        assert set(result.routers.values()) == {"reloaded"}
        clerk = "clerk@shop"
        received = _receive_in_background(_account(live, 2, clerk), "orders")
        _send(_account(live, 0, clerk), "orders", 1)
        assert received.result(timeout=20) == "m0"
        took = time.monotonic() - applied
        print(f"first message on the new anycast address {took:.2f}s after apply returned")
        _send(_account(live, 0, clerk), "invoices", 1)
        assert _receive(_account(live, 1, clerk), "invoices", 1) == ["m0"]

        # The clerk stays connected while the address and the user are removed.
        clerks = Load([Flow(_account(live, 1, clerk), "orders", send=False)])
        clerks.handler.counts["received"] = 51  # nothing to receive: do not wait for traffic
        clerks.start()
        before = load.counts()
        _apply(live, SAMPLE + WITHOUT_ORDERS)
        wait_until(
            lambda: clerks.counts()["closed"] == 1, 15, "the removed user's connection to close"
        )
        clerks.stop()
        wait_until(
            lambda: load.counts()["received"] > before["received"] + 50, 20, "traffic after apply"
        )
    finally:
        counts = load.stop()
    print(f"load during both applies: {dict(counts)}")
    assert counts["closed"] == 0, counts
    assert counts["link closed"] == 0, counts
    assert counts["released"] == 0 and counts["modified"] == 0, counts
    assert _router_pids(live) == pids  # reloaded, never restarted
    assert all(r.process is not None and r.process.poll() is None for r in live.routers)


def test_a_queue_holding_messages_is_deleted_only_with_force(live: Mesh) -> None:
    _apply(live, SAMPLE + SHOP)
    _send(_account(live, 0, "clerk@shop"), "invoices", 3)
    wait_until(lambda: _depth(live, "shop.invoices") == 3, 15, "3 messages in shop.invoices")
    config = live.directory / "config"
    files = installed_files(config)
    with pytest.raises(
        ApplyRefused, match=r"queue shop\.invoices .*holds 3 message\(s\); .*--force shop\.invoices"
    ):
        _apply(live, SAMPLE + WITHOUT_ORDERS.replace("invoices", "receipts"))
    assert installed_files(config) == files
    assert _depth(live, "shop.invoices") == 3
    _apply(live, SAMPLE + WITHOUT_ORDERS.replace("invoices", "receipts"), force=["shop.invoices"])
    assert _depth(live, "shop.invoices") is None
    assert _depth(live, "shop.receipts") == 0


def test_an_invalid_model_changes_nothing_and_says_where(live: Mesh) -> None:
    _apply(live, SAMPLE)
    config = live.directory / "config"
    files, queues = installed_files(config), _broker(live).list_queues()
    bad = SAMPLE + SHOP.replace("type: anycast", "type: anycats")
    lines = bad.splitlines()
    line = next(i for i, text in enumerate(lines, 1) if "anycats" in text)
    with pytest.raises(ModelInvalidError, match=rf"iot\.model\.yml:{line}:"):
        _apply(live, bad)
    assert installed_files(config) == files
    assert _broker(live).list_queues() == queues


def test_a_model_over_its_plan_limits_is_refused(live: Mesh) -> None:
    _apply(live, SAMPLE)
    config = live.directory / "config"
    files = installed_files(config)
    tight = SHOP.replace("plan: standard-small}", "plan: tiny}") + (
        "\n---\napiVersion: enmesh.io/v1\nkind: AddressSpacePlan\nmetadata: {name: tiny}\n"
        "spec:\n  addressSpaceType: standard\n  resourceLimits: {connections: 10, addresses: 1}\n"
        "  addressPlans: [standard-anycast, standard-queue]\n"
    )
    with pytest.raises(ModelInvalidError, match=r"allows at most 1 \(resourceLimits.addresses\)"):
        _apply(live, SAMPLE + tight)
    assert installed_files(config) == files


def test_dry_run_prints_the_plan_and_changes_nothing(
    live: Mesh, capsys: pytest.CaptureFixture[str]
) -> None:
    _apply(live, SAMPLE)
    config = live.directory / "config"
    files, queues = installed_files(config), _broker(live).list_queues()
    _apply(live, SAMPLE + SHOP.replace("clerk", "planned"), dry_run=True)
    out = capsys.readouterr().out
    for line in (
        "+ address shop/orders",
        "+ autoLink shop/invoices in via broker-0",
        "+ vhost group shop/planned",
        "+ queue enmesh/shop.invoices",
        "+ policy enmesh/shop-queues",
        "+ user planned@shop",
    ):
        assert line in out, out
    assert installed_files(config) == files
    assert _broker(live).list_queues() == queues
    assert not Path(live.secrets_dir / "shop-planned").exists()  # no password made


def test_a_changed_password_applies_to_new_connections(live: Mesh) -> None:
    _apply(live, SAMPLE + SHOP)
    old = _password(live, "shop-clerk")
    live.set_secret("shop-clerk", "password", "changed-" + old)
    result = _apply(live, SAMPLE + SHOP)
    assert [c.key for c in result.plan.users] == ["clerk@shop"]
    assert result.plan.users[0].details == ("password changed",)
    _account(live, 0, "clerk@shop", "changed-" + old).blocking().close()
    with pytest.raises(ConnectionException, match=r"(?i)auth"):
        _account(live, 0, "clerk@shop", old).blocking(timeout=10)


NEWS = """
---
apiVersion: enmesh.io/v1
kind: Address
metadata: {name: shop.news}
spec: {addressSpace: shop, address: news, type: topic, plan: standard-topic}
---
apiVersion: enmesh.io/v1
kind: Address
metadata: {name: shop.archive}
spec:
  {addressSpace: shop, address: archive, type: subscription, plan: standard-subscription,
   topic: news}
"""


def _definitions(mesh: Mesh) -> dict[str, Any]:
    text = _broker(mesh).ctl("export_definitions", "-", "--format", "json").stdout
    return dict(json.loads(text[text.index("{") :]))


def test_a_topic_and_its_subscription_are_removed_from_the_broker(live: Mesh) -> None:
    _apply(live, SAMPLE + SHOP + NEWS)
    exported = _definitions(live)
    assert "shop.news" in {e["name"] for e in exported["exchanges"]}
    assert ("shop.news", "shop.archive") in {
        (b["source"], b["destination"]) for b in exported["bindings"]
    }
    result = _apply(live, SAMPLE + SHOP)
    removed = {(c.kind, c.key) for c in result.plan.brokers[0].changes}
    assert removed == {
        ("exchange", "enmesh/shop.news"),
        ("queue", "enmesh/shop.archive"),
        ("binding", "enmesh/shop.news -> queue shop.archive []"),
    }
    exported = _definitions(live)
    assert "shop.news" not in {e["name"] for e in exported["exchanges"]}
    assert "shop.archive" not in {q["name"] for q in exported["queues"]}
    assert not [b for b in exported["bindings"] if b["source"] == "shop.news"]
    assert "no changes" in _apply_text(live, SAMPLE + SHOP)


def _apply_text(mesh: Mesh, model: str) -> str:
    lines: list[str] = []
    model_file(mesh).write_text(model)
    apply_stack(stack_file(mesh), mesh_target(mesh, _broker(mesh)), refresh=True, echo=lines.append)
    return "\n".join(lines)
