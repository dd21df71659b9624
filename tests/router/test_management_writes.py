"""Management writes against a running router, with the requests qdmanage sends: CREATE and
DELETE of an address take effect at once, a connection QUERY lists what qdrouterd's does,
UPDATE adminStatus=deleted closes one connection, and a tenant's write is refused."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from proton import ConnectionException, LinkException

from tests.router.conftest import account, sender_refusal
from tests.support.amqp import Account
from tests.support.mesh import Mesh, wait_until
from tests.support.qdmanage import ADMINISTRATOR, Qdmanage, administered_router, rows

ADDRESS = "org.apache.qpid.dispatch.router.config.address"


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Mesh, Account]]:
    with administered_router(tmp_path_factory.mktemp("mgmt-writes")) as running:
        yield running


def _addresses(client: Qdmanage) -> dict[str, dict[str, Any]]:
    return {row["prefix"]: row for row in rows(client.query("address"))}


def test_create_and_delete_an_address_as_qdmanage(router: tuple[Mesh, Account]) -> None:
    mesh, admin = router
    assert sender_refusal(mesh, "backend@iot", "broadcast") is None
    with Qdmanage(admin) as client:
        existing = _addresses(client)["iot/broadcast"]
        deleted = client.delete(type="address", identity=existing["identity"])
        assert deleted.status == 204, deleted.description
        assert "iot/broadcast" not in _addresses(client)
        created = client.create(
            {"prefix": "iot/broadcast", "distribution": "unavailable"}, type="address", name="off"
        )
        assert created.status == 201, created.description
        assert created.description == "Created"
        assert created.body["name"] == "off" and created.body["distribution"] == "unavailable"
        assert created.body["type"] == ADDRESS
        # The new address is in force for the next attach: qdrouterd's words for unavailable.
        refusal = sender_refusal(mesh, "backend@iot", "broadcast")
        assert refusal is not None and "Node not found" in refusal
        client.delete(type="address", name="off")
        client.create({"prefix": "iot/broadcast", "distribution": "multicast"}, type="address")
    assert sender_refusal(mesh, "backend@iot", "broadcast") is None


def test_bad_create_is_refused_with_qdrouterd_status(router: tuple[Mesh, Account]) -> None:
    _, admin = router
    with Qdmanage(admin) as client:
        unknown = client.create({"prefix": "x", "colour": "red"}, type="address")
        missing = client.delete(type="address", name="no-such-address")
        router_update = client.update({"mode": "standalone"}, type="router", name="self")
    assert unknown.status == 400
    assert "unknown attribute 'colour'" in unknown.description
    assert missing.status == 404
    assert router_update.status == 501


def test_query_connections_as_qdmanage(router: tuple[Mesh, Account]) -> None:
    mesh, admin = router
    tenant = account(mesh, 0, "device@iot").blocking()
    try:
        with Qdmanage(admin) as client:
            found = rows(client.query("connection"))
    finally:
        tenant.close()
    users = {row["user"]: row for row in found if row["role"] == "normal"}
    assert users[ADMINISTRATOR]["tenant"] is None  # the stack's, not an address space's
    assert users["device@iot"]["tenant"] == "iot" and users["device@iot"]["opened"] is True


def test_update_connection_deleted_closes_only_that_one(router: tuple[Mesh, Account]) -> None:
    mesh, admin = router
    doomed = account(mesh, 0, "device@iot").blocking()
    other = account(mesh, 0, "backend@iot").blocking()
    try:
        with Qdmanage(admin) as client:
            row = next(r for r in rows(client.query("connection")) if r["user"] == "device@iot")
            reply = client.update(
                {"adminStatus": "deleted"}, type="connection", identity=row["identity"]
            )
            assert reply.status == 200, reply.description

            def closed() -> bool:
                try:
                    doomed.create_sender("telemetry")
                except (ConnectionException, LinkException):
                    return True
                return False

            wait_until(closed, 10, "the deleted connection to close")
            other.create_sender("commands")  # still open
            remaining = {r["user"] for r in rows(client.query("connection"))}
        assert "device@iot" not in remaining and "backend@iot" in remaining
    finally:
        other.close()
        doomed.close()


def test_a_tenants_write_is_refused(router: tuple[Mesh, Account]) -> None:
    mesh, admin = router
    with Qdmanage(account(mesh, 0, "backend@iot")) as tenant:  # has the manage right
        reply = tenant.create({"prefix": "iot/mine"}, type="address")
        read = tenant.query("router.address")
    assert reply.status == 403
    assert "amqp:unauthorized-access" in reply.description
    assert read.status == 200  # reading its own space stays allowed
    with Qdmanage(admin) as client:
        assert "iot/mine" not in _addresses(client)
