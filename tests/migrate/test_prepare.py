"""`enmesh migrate prepare` between two meshes side by side, each with its own RabbitMQ
node, secrets and state: the target gets the source's model (a tenant the source gained at
run time) and every user's password, applied live, so a client changes only its URL; a
connection already open on the target stays; a second run changes nothing; a document
both define differently stops it before anything changes."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from proton import ConnectionException, Message

from enmesh.console.runtime import Source
from enmesh.control.apply import apply_stack
from enmesh.control.target import Target
from enmesh.migrate.ends import MigrateError
from enmesh.migrate.prepare import RUNTIME_FILE, prepare
from tests.router.conftest import account
from tests.support.amqp import Account
from tests.support.apply_target import SHOP, mesh_target, model_file, stack_file
from tests.support.mesh import Mesh, wait_until
from tests.support.migrate_ends import depth
from tests.support.rabbitmq import RabbitMQBroker
from tests.support.stack import brokered_mesh

CONFLICT = """
---
apiVersion: enmesh.io/v1
kind: AddressSpace
metadata: {name: shop}
spec: {type: standard, plan: standard-medium}
"""


@pytest.fixture(scope="module")
def meshes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Mesh, Mesh]]:
    with ExitStack() as stack:
        source = stack.enter_context(brokered_mesh(tmp_path_factory.mktemp("source"), routers=1))
        target = stack.enter_context(brokered_mesh(tmp_path_factory.mktemp("target"), routers=1))
        # The source gained a tenant while it ran (as the console or `enmesh apply` add one).
        model_file(source).write_text(model_file(source).read_text() + SHOP)
        apply_stack(stack_file(source), _target(source), echo=lambda _: None)
        yield source, target


def _target(mesh: Mesh) -> Target:
    broker = mesh.extra["broker"]
    assert isinstance(broker, RabbitMQBroker)
    return mesh_target(mesh, broker)


def _secret(mesh: Mesh, name: str) -> str:
    return (mesh.secrets_dir / name / "password").read_text().rstrip("\n")


def _runtime(mesh: Mesh) -> Path:
    return mesh.directory / "state" / "runtime" / RUNTIME_FILE


def test_a_document_both_define_differently_stops_it_before_anything_changes(
    meshes: tuple[Mesh, Mesh],
) -> None:
    source, target = meshes
    conflicting = target.directory / "state" / "runtime" / "conflict.model.yml"
    conflicting.parent.mkdir(parents=True, exist_ok=True)
    conflicting.write_text(CONFLICT)
    password_before = _secret(target, "iot-device")
    try:
        with pytest.raises(MigrateError, match=r"differently.*AddressSpace shop"):
            prepare(stack_file(source), stack_file(target), _target(target), echo=print)
    finally:
        conflicting.unlink()
    assert not _runtime(target).exists()
    assert _secret(target, "iot-device") == password_before


def test_the_target_gets_the_model_and_passwords_and_clients_change_only_the_url(
    meshes: tuple[Mesh, Mesh],
) -> None:
    source, target = meshes
    old_password = target.passwords["device@iot"]
    already_open = account(target, 0, "device@iot").blocking(timeout=30)
    try:
        done = prepare(stack_file(source), stack_file(target), _target(target), echo=print)
        assert done.added == [
            "AddressSpace shop",
            "Address shop.orders",
            "Address shop.invoices",
            "MessagingUser shop.clerk",
        ]
        assert done.passwords == ["app@acme", "backend@iot", "clerk@shop", "device@iot"]
        for name in ("acme-app", "iot-device", "iot-backend", "shop-clerk"):
            assert _secret(target, name) == _secret(source, name)
        already_open.create_sender("telemetry")  # still open after the password changed
        # The target's console sees what prepare added (the whole runtime part).
        tenants = Source.of(stack_file(target)).model().tenants
        assert "shop" in {tenant.name for tenant in tenants}
    finally:
        already_open.close()

    # The source's passwords open the target; the target's old one no longer does.
    device = Account(target.url(0), "device@iot", _secret(source, "iot-device"), "iot")
    device.blocking(timeout=30).close()
    with pytest.raises(ConnectionException):
        Account(target.url(0), "device@iot", old_password, "iot").blocking(timeout=30)
    clerk = Account(target.url(0), "clerk@shop", _secret(source, "shop-clerk"), "shop")
    connection = clerk.blocking(timeout=30)
    try:
        connection.create_sender("invoices").send(Message(body="invoice 1", durable=True))
    finally:
        connection.close()
    wait_until(lambda: depth(target, "shop.invoices") == 1, 30, "the invoice stored on target")

    again = prepare(stack_file(source), stack_file(target), _target(target), echo=print)
    assert (again.added, again.passwords) == ([], [])
