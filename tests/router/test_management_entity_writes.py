"""Management writes of connector, autoLink, linkRoute, listener and vhost, with the requests
qdmanage sends, each checked by what the router then does on the wire: a created connector
connects to its peer, an autoLink attaches on it and detaches when deleted, a linkRoute
routes a client's attach to it, a listener opens and closes its port, a vhost update
changes a limit for the next connection. And a router whose config enables no policy
answers management writes from any client, as qdrouterd does."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from proton import ConnectionException

from tests.router.conftest import account
from tests.support.amqp import Account, Scenario, run
from tests.support.mesh import Mesh, RouterProcess, wait_until
from tests.support.ports import free_port, port_is_listening
from tests.support.qdmanage import Qdmanage, Reply, administered_router, rows

PEER = "fake-broker"


def _routed_source_allowed(mesh: Mesh) -> None:
    """The operator lets backend@iot receive from what the test's linkRoute will serve."""
    policy = mesh.directory / "config" / "auth" / "policies" / "iot.json"
    sources = '"sources": "alerts, alerts::audit'
    assert sources in policy.read_text()
    policy.write_text(
        policy.read_text().replace(sources, sources.replace(': "', ': "manual-route/*, '))
    )


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Mesh, Account]]:
    directory = tmp_path_factory.mktemp("mgmt-entities")
    with administered_router(directory, prepare=_routed_source_allowed) as running:
        yield running


def _write(admin: Account, operation: str, *args: Any, **kwargs: Any) -> Reply:
    with Qdmanage(admin) as client:
        reply: Reply = getattr(client, operation)(*args, **kwargs)
    return reply


class FakeBroker(Scenario):
    """A route-container peer the router is told to connect to through management.

    Once the router's connection is open: an autoLink is created (its attach must arrive),
    then deleted (its detach must arrive); then the client's receiver for `alerts` is
    routed here by a created linkRoute. Records the addresses it saw attached."""

    def __init__(self, admin: Account, mesh: Mesh) -> None:
        super().__init__()
        self.admin, self.mesh = admin, mesh
        self.port = free_port()
        self.replies: dict[str, int] = {}
        self.attached: list[tuple[str, str]] = []  # (link role seen here, address)
        self.detached: list[str] = []
        self.client: Any = None
        self.peer: Any = None  # the router's connection to this peer

    def on_start(self, event: Any) -> None:
        self.acceptor = event.container.listen(f"127.0.0.1:{self.port}")
        attributes = {"role": "route-container", "host": "127.0.0.1", "port": str(self.port)}
        self.replies["connector"] = _write(
            self.admin, "create", attributes, type="connector", name=PEER
        ).status

    def on_connection_opened(self, event: Any) -> None:
        if event.connection in self.connections:
            return  # the client's own connection
        self.peer = event.connection
        auto = {"address": "iot/manual", "direction": "in", "connection": PEER}
        self.replies["autoLink"] = _write(
            self.admin, "create", auto, type="autoLink", name="manual"
        ).status

    def on_link_opening(self, event: Any) -> None:
        link = event.link
        address = link.remote_source.address if link.is_sender else link.remote_target.address
        self.attached.append(("sender" if link.is_sender else "receiver", address))
        link.source.address = link.remote_source.address
        link.target.address = link.remote_target.address
        link.open()
        if address == "iot/manual":
            self.replies["delete autoLink"] = _write(
                self.admin, "delete", type="autoLink", name="manual"
            ).status
        elif self.client is not None:
            self.done()

    def on_link_closing(self, event: Any) -> None:
        address = event.link.remote_source.address
        self.detached.append(address)
        event.link.close()
        if address == "iot/manual":
            route = {"prefix": "iot/manual-route", "direction": "in", "connection": PEER}
            self.replies["linkRoute"] = _write(
                self.admin, "create", route, type="linkRoute", name="manual-route"
            ).status
            self.client = self.open(account(self.mesh, 0, "backend@iot"))
            event.container.create_receiver(self.client, "manual-route/x")

    def done(self) -> None:
        super().done()
        if self.peer is not None:
            self.peer.close()
        self.acceptor.close()


def test_connector_autolink_and_linkroute_writes_act_on_the_wire(
    router: tuple[Mesh, Account],
) -> None:
    mesh, admin = router
    scenario = run(FakeBroker(admin, mesh), timeout=60)
    assert scenario.replies == {
        "connector": 201,
        "autoLink": 201,
        "delete autoLink": 204,
        "linkRoute": 201,
    }
    # The router took messages for iot/manual from the peer (an `in` autoLink: the router
    # receives, the peer sends), dropped the link when the autoLink went, then passed the
    # client's receiver through, as the linkRoute said.
    assert ("sender", "iot/manual") in scenario.attached
    assert "iot/manual" in scenario.detached
    assert any(
        role == "sender" and "manual-route/x" in address for role, address in scenario.attached
    ), scenario.attached


def test_listener_create_opens_a_port_and_delete_closes_it(router: tuple[Mesh, Account]) -> None:
    mesh, admin = router
    port = free_port()
    attributes = {
        "host": "127.0.0.1",
        "port": str(port),
        "role": "normal",
        "authenticatePeer": True,
        "saslMechanisms": "SCRAM-SHA-256",
    }
    assert _write(admin, "create", attributes, type="listener", name="extra").status == 201
    wait_until(lambda: port_is_listening(port), 10, "the new listener")
    extra = Account(f"amqp://127.0.0.1:{port}", "device@iot", mesh.passwords["device@iot"], "iot")
    connection = extra.blocking()
    connection.create_sender("telemetry")  # a client of the new port, with the model's rights
    connection.close()
    assert _write(admin, "delete", type="listener", name="extra").status == 204
    wait_until(lambda: not port_is_listening(port), 10, "the listener to close")


def test_vhost_update_changes_a_limit_for_the_next_connection(
    router: tuple[Mesh, Account],
) -> None:
    mesh, admin = router
    with Qdmanage(admin) as client:
        vhost = next(r for r in rows(client.query("vhost")) if r["hostname"] == "iot")
    first = account(mesh, 0, "device@iot").blocking()
    try:
        reply = _write(admin, "update", {"maxConnections": 1}, type="vhost", name=vhost["name"])
        assert reply.status == 200, reply.description
        with pytest.raises(ConnectionException):
            account(mesh, 0, "backend@iot").blocking()  # the second of iot: over the limit
    finally:
        first.close()
        restored = _write(
            admin,
            "update",
            {"maxConnections": vhost["maxConnections"]},
            type="vhost",
            name=vhost["name"],
        )
    assert restored.status == 200
    account(mesh, 0, "backend@iot").blocking().close()


PLAIN_CONFIG = """router {{
    mode: standalone
    id: plain
}}

listener {{
    host: 127.0.0.1
    port: {port}
    role: normal
    authenticatePeer: no
    saslMechanisms: ANONYMOUS
}}

listener {{
    host: 127.0.0.1
    port: {metrics}
    http: yes
    websockets: no
}}
"""


def test_without_a_policy_management_is_open_as_in_qdrouterd(tmp_path: Path) -> None:
    port, metrics = free_port(), free_port()
    config = tmp_path / "plain.conf"
    config.write_text(PLAIN_CONFIG.format(port=port, metrics=metrics))
    process = RouterProcess(0, config, tmp_path / "plain.log", port, 0, metrics)
    process.start()
    try:
        anyone = Account(f"amqp://127.0.0.1:{port}", None, None, "localhost", None, "ANONYMOUS")
        with Qdmanage(anyone) as client:
            created = client.create(
                {"prefix": "open", "distribution": "multicast"}, type="address", name="open"
            )
            found = [r["prefix"] for r in rows(client.query("address"))]
        assert created.status == 201, created.description
        assert "open" in found
    finally:
        process.stop()
