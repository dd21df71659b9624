"""`qdstat -a`, `-c` and `-l` against a running router, with the requests qpid-dispatch 1.19's
qdstat sends (tools/qdstat, BusManager): GET-MGMT-NODES (display), a router QUERY for the
heading (display_datetime_router_id), then the table's QUERY: displayAddresses asks
router.address for ADDRESS_COLUMNS, displayConnections every connection attribute,
displayRouterLinks router.link for LINK_COLUMNS. On router 0 of two, a consumer of
iot/telemetry has received the N messages a producer sent; the tables must show them."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from proton import Message
from proton.utils import BlockingConnection

from tests.router.conftest import account
from tests.support.mesh import build_mesh
from tests.support.qdmanage import ADMINISTRATOR, Qdstat, Reply, add_administrator, rows

N = 7
PREFIX = "org.apache.qpid.dispatch."


def _names(text: str) -> list[str]:
    return text.split()


ADDRESS_COLUMNS = _names(
    "distribution inProcess subscriberCount remoteCount containerCount deliveriesIngress "
    "deliveriesEgress deliveriesRedirectedToFallback deliveriesTransit deliveriesToContainer "
    "deliveriesFromContainer name priority"
)
LINK_COLUMNS = _names(
    "linkType linkDir connectionId identity peer owningAddr capacity undeliveredCount "
    "unsettledCount deliveryCount presettledCount droppedPresettledCount acceptedCount "
    "rejectedCount releasedCount modifiedCount deliveriesDelayed1Sec deliveriesDelayed10Sec "
    "deliveriesStuck creditAvailable zeroCreditSeconds adminStatus operStatus linkName "
    "priority settleRate"
)
# What displayConnections reads of each row (connSecurity, connAuth, noTrailingSlash).
CONNECTION_READS = _names(
    "identity host container role protocol dir isAuthenticated sasl user isEncrypted "
    "sslProto sslCipher tenant lastDlvSeconds uptimeSeconds"
)
TABLES = {
    "-a": ("router.address", ADDRESS_COLUMNS),
    "-c": ("connection", None),
    "-l": ("router.link", LINK_COLUMNS),
}


def _send_and_receive(consumer: BlockingConnection, producer: BlockingConnection) -> None:
    """N unsettled messages from the producer (a thread: send waits for the outcome) to the
    consumer, which accepts each; done when the producer has every settlement."""
    receiver = consumer.create_receiver("telemetry", credit=N)
    sender = producer.create_sender("telemetry")
    failures: list[BaseException] = []

    def send_all() -> None:
        try:
            for number in range(N):
                sender.send(Message(body=number))  # raises if released or rejected
        except BaseException as exc:  # reported below
            failures.append(exc)

    sending = threading.Thread(target=send_all, daemon=True)
    sending.start()
    bodies = []
    for _ in range(N):
        bodies.append(receiver.receive(timeout=15).body)
        receiver.accept()
    # The consumer's connection must keep running to send the last accept.
    consumer.wait(lambda: not sending.is_alive(), timeout=15, msg="the producer's settlements")
    assert not failures and bodies == list(range(N))


@pytest.fixture(scope="module")
def qdstat(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, list[Reply]]]:
    """Each option's replies, in the order qdstat asks: management nodes, router, table."""
    mesh = build_mesh(tmp_path_factory.mktemp("qdstat"), routers=2)
    admin = add_administrator(mesh)
    try:
        mesh.start()
        mesh.wait_converged()
        consumer = account(mesh, 0, "backend@iot").blocking()
        producer = account(mesh, 0, "device@iot").blocking()
        try:
            _send_and_receive(consumer, producer)
            replies = {}
            for option, (entity_type, columns) in TABLES.items():
                with Qdstat(admin) as client:  # one qdstat process, one connection
                    replies[option] = [
                        client.get_mgmt_nodes(),
                        client.query(PREFIX + "router"),
                        client.query(PREFIX + entity_type, columns),
                    ]
            yield replies
        finally:
            producer.close()
            consumer.close()
    finally:
        mesh.stop()


def _table(qdstat: dict[str, list[Reply]], option: str) -> list[dict[str, Any]]:
    return rows(qdstat[option][2])


@pytest.mark.parametrize("option", TABLES)
def test_every_request_is_answered(qdstat: dict[str, list[Reply]], option: str) -> None:
    nodes, router, table = qdstat[option]
    assert [r.status for r in qdstat[option]] == [200, 200, 200], table.description
    assert nodes.body == ["amqp:/_topo/0/test-router-1/$management"]
    assert rows(router)[0]["id"] == "test-router-0"  # the heading qdstat prints
    columns = TABLES[option][1]
    if columns is not None:  # qdrouterd answers with the names asked for, in order
        assert table.body["attributeNames"] == columns
    else:
        assert set(CONNECTION_READS) <= set(table.body["attributeNames"])


def test_addresses_show_the_deliveries(qdstat: dict[str, list[Reply]]) -> None:
    found = {row["name"]: row for row in _table(qdstat, "-a")}
    telemetry = found["M0iot/telemetry"]
    assert telemetry["distribution"] == "balanced"
    assert (telemetry["subscriberCount"], telemetry["remoteCount"]) == (1, 0)  # local, remote
    assert (telemetry["deliveriesIngress"], telemetry["deliveriesEgress"]) == (N, N)  # in, out
    assert telemetry["deliveriesTransit"] == 0 and telemetry["containerCount"] == 0
    assert found["M0iot/broadcast"]["distribution"] == "multicast"
    assert found["M0iot/broadcast"]["deliveriesIngress"] == 0
    assert all(isinstance(row["priority"], int) for row in found.values())  # `pri` compares


def test_connections_list_clients_and_the_other_router(qdstat: dict[str, list[Reply]]) -> None:
    connections = _table(qdstat, "-c")
    clients = {row["user"]: row for row in connections if row["role"] == "normal"}
    assert {"backend@iot", "device@iot", ADMINISTRATOR} <= set(clients)
    for user in ("backend@iot", "device@iot"):
        row = clients[user]
        assert (row["dir"], row["tenant"], row["protocol"]) == ("in", "iot", "amqp")
        assert row["isAuthenticated"] and row["sasl"] == "SCRAM-SHA-256"  # user(SCRAM-SHA-256)
        assert row["isEncrypted"] is False  # no-security
        assert row["host"].startswith("127.0.0.1:") and isinstance(row["uptimeSeconds"], int)
    assert clients[ADMINISTRATOR]["tenant"] is None
    [mesh] = [row for row in connections if row["role"] == "inter-router"]
    assert mesh["container"] == "test-router-1"
    assert mesh["isEncrypted"] and mesh["sslProto"] and mesh["sslCipher"]  # TLS(cipher)
    assert len({row["identity"] for row in connections}) == len(connections)


def test_links_show_direction_address_and_counts(qdstat: dict[str, list[Reply]]) -> None:
    ids = {row["user"]: row["identity"] for row in _table(qdstat, "-c") if row["user"]}
    inter_router = next(r["identity"] for r in _table(qdstat, "-c") if r["role"] != "normal")
    links = _table(qdstat, "-l")
    [consumer] = [r for r in links if r["connectionId"] == ids["backend@iot"]]
    [producer] = [r for r in links if r["connectionId"] == ids["device@iot"]]
    assert (consumer["linkType"], consumer["linkDir"]) == ("endpoint", "out")
    assert (producer["linkType"], producer["linkDir"]) == ("endpoint", "in")
    for link in (consumer, producer):
        assert link["owningAddr"] == "M0iot/telemetry"  # qdrouterd's hash key
        assert (link["deliveryCount"], link["acceptedCount"]) == (N, N)
        assert link["unsettledCount"] == 0 and link["undeliveredCount"] == 0
        assert link["adminStatus"] == "enabled" and link["operStatus"] == "up"
    assert all(isinstance(r["zeroCreditSeconds"], int) for r in links)  # `blkd` compares it
    mesh_dirs = sorted(r["linkDir"] for r in links if r["connectionId"] == inter_router)
    assert mesh_dirs and set(mesh_dirs) == {"in", "out"}
    assert {r["linkType"] for r in links if r["connectionId"] == inter_router} == {"inter-router"}


def test_address_names_carry_the_mobile_class_and_phase(qdstat: dict[str, list[Reply]]) -> None:
    # qdstat reads the class from name[0] and the phase from name[1] (a waypoint: M1)
    names = {row["name"] for row in _table(qdstat, "-a")}
    assert {"M0iot/telemetry", "M0iot/commands", "M1iot/commands"} <= names, names


def test_connections_that_carried_deliveries_report_last_delivery(
    qdstat: dict[str, list[Reply]],
) -> None:
    clients = {row["user"]: row for row in _table(qdstat, "-c")}
    assert isinstance(clients["device@iot"]["lastDlvSeconds"], int)
    assert isinstance(clients["backend@iot"]["lastDlvSeconds"], int)


def test_every_link_has_a_delivery_count(qdstat: dict[str, list[Reply]]) -> None:
    assert all(isinstance(row["deliveryCount"], int) for row in _table(qdstat, "-l"))
