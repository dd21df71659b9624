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
from tests.support.amqp import Account
from tests.support.mesh import Mesh, RouterProcess, wait_until
from tests.support.peer_process import PeerProcess
from tests.support.ports import free_port, port_is_listening
from tests.support.qdmanage import Qdmanage, Reply, administered_router, rows

PEER = "fake-broker"


def _routed_source_allowed(mesh: Mesh) -> None:
    """The operator lets backend@iot receive from what the test's linkRoute will serve."""
    policy = mesh.directory / "config" / "auth" / "policies" / "iot.json"
    sources = '"sources": "alerts, alerts::audit'
    assert sources in policy.read_text()
    policy.write_text(
        policy.read_text().replace(
            sources, sources.replace(': "', ': "manual-route/*, cluster-route/*, ')
        )
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


def test_link_routes_of_one_prefix_to_several_connections_use_one_that_is_up(
    router: tuple[Mesh, Account],
) -> None:
    """The nodes of a broker cluster: one linkRoute per node's connection. With the first
    node's connection down, an attach goes to a node that is connected."""
    mesh, admin = router
    peer = PeerProcess()
    try:
        peer.expect("listening")
        connectors = {"cluster.0": free_port(), "cluster.1": peer.port}  # .0: nobody listens
        for name, port in connectors.items():
            connector = {"role": "route-container", "host": "127.0.0.1", "port": str(port)}
            assert _write(admin, "create", connector, type="connector", name=name).status == 201
            route = {"prefix": "iot/cluster-route", "direction": "in", "connection": name}
            assert (
                _write(admin, "create", route, type="linkRoute", name=f"{name}-route").status == 201
            )
        peer.expect("open")
        client = account(mesh, 0, "backend@iot").blocking()
        try:
            client.create_receiver("cluster-route/x")  # answered through cluster.1
        finally:
            client.close()
        peer.expect("attach sender iot/cluster-route/x")
    finally:
        peer.stop()


def test_connector_autolink_and_linkroute_writes_act_on_the_wire(
    router: tuple[Mesh, Account],
) -> None:
    mesh, admin = router
    peer = PeerProcess()
    try:
        peer.expect("listening")
        connector = {"role": "route-container", "host": "127.0.0.1", "port": str(peer.port)}
        assert _write(admin, "create", connector, type="connector", name=PEER).status == 201
        peer.expect("open")  # the router connected to it
        auto = {"address": "iot/manual", "direction": "in", "connection": PEER}
        assert _write(admin, "create", auto, type="autoLink", name="manual").status == 201
        # an `in` autoLink: the router receives from the peer, which sends
        peer.expect("attach sender iot/manual")
        assert _write(admin, "delete", type="autoLink", name="manual").status == 204
        peer.expect("detach iot/manual")
        route = {"prefix": "iot/manual-route", "direction": "in", "connection": PEER}
        reply = _write(admin, "create", route, type="linkRoute", name="manual-route")
        assert reply.status == 201
        client = account(mesh, 0, "backend@iot").blocking()
        try:
            client.create_receiver("manual-route/x")  # answered by the peer, through the route
        finally:
            client.close()
        peer.expect("attach sender iot/manual-route/x")
    finally:
        peer.stop()


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
