"""The management node answers as qdrouterd 1.19's does: GET-TYPES, GET-ATTRIBUTES,
GET-OPERATIONS, GET-MGMT-NODES, a connection QUERY as qdmanage sends it, and a reply held
for a reply receiver that has not granted credit yet."""

from __future__ import annotations

from typing import Any

from proton import Message, symbol
from proton.utils import BlockingConnection, SyncRequestResponse

from tests.router.conftest import account
from tests.router.test_observability import management
from tests.support.mesh import Mesh

PREFIX = "org.apache.qpid.dispatch."
CONNECTION = PREFIX + "connection"


def node_request(client: Any, operation: str, **properties: Any) -> Message:
    """A request to the node itself, as qpid_dispatch's management client builds it."""
    message = Message(
        properties={"operation": operation, "type": "org.amqp.management", "name": "self"}
        | properties,
        body={"attributeNames": []} if operation == "QUERY" else {},
    )
    response: Message = client.call(message)
    assert response.properties["statusCode"] == 200, response.properties
    return response


def test_get_types_attributes_operations(full_mesh: Mesh) -> None:
    with management(full_mesh, 0) as client:
        types = node_request(client, "GET-TYPES").body
        attributes = node_request(client, "GET-ATTRIBUTES", entityType="connection").body
        operations = node_request(client, "GET-OPERATIONS").body
        configuration = node_request(client, "GET-TYPES", entityType="configurationEntity").body
    assert types[CONNECTION] == [PREFIX + "operationalEntity", PREFIX + "entity"]
    assert types[PREFIX + "listener"] == [PREFIX + "configurationEntity", PREFIX + "entity"]
    assert PREFIX + "router.config.autoLink" in configuration and CONNECTION not in configuration
    assert list(attributes) == [CONNECTION]
    for name in ("host", "role", "dir", "opened", "container", "properties", "tenant", "name"):
        assert name in attributes[CONNECTION]
    node = operations[PREFIX + "org.amqp.management"]
    assert {"QUERY", "GET-TYPES", "GET-ATTRIBUTES", "GET-OPERATIONS", "GET-MGMT-NODES"} <= set(node)
    assert operations[CONNECTION] == ["READ"]  # as qdrouterd's (UPDATE works, unlisted)
    assert operations[PREFIX + "router.config.address"] == ["CREATE", "DELETE", "READ"]


def test_get_mgmt_nodes_names_the_other_routers(full_mesh: Mesh) -> None:
    with management(full_mesh, 0) as client:
        nodes = node_request(client, "GET-MGMT-NODES").body
    assert sorted(nodes) == [
        "amqp:/_topo/0/test-router-1/$management",
        "amqp:/_topo/0/test-router-2/$management",
    ]


def test_connection_query_as_qdmanage_sends_it(full_mesh: Mesh) -> None:
    properties = {symbol("product"): symbol("probe"), symbol("version"): "1.0 ü", "n": 7}
    options = account(full_mesh, 0, "backend@iot").options()
    del options["reconnect"]
    probe = BlockingConnection(
        options.pop("url"), timeout=15, properties=properties, container_id="probe-1", **options
    )
    try:
        with management(full_mesh, 0) as client:
            reply = node_request(client, "QUERY", entityType="connection", offset=0, count=500)
    finally:
        probe.close()
    names = reply.body["attributeNames"]
    assert names[:6] == ["name", "identity", "host", "role", "protocol", "dir"]  # qdrouterd's
    rows = [dict(zip(names, row, strict=True)) for row in reply.body["results"]]
    mine = next(r for r in rows if r["container"] == "probe-1")
    assert mine["opened"] is True and mine["dir"] == "in" and mine["role"] == "normal"
    assert mine["host"].startswith("127.0.0.1:") and mine["name"] == f"connection/{mine['host']}"
    assert mine["user"] == "backend@iot" and mine["tenant"] == "iot"
    assert mine["isAuthenticated"] and mine["isEncrypted"] is False
    assert mine["sasl"] == "SCRAM-SHA-256" and mine["identity"].isdigit()
    assert mine["properties"] == {"product": "probe", "version": "1.0 ü", "n": 7}


def test_reply_waits_for_the_reply_receivers_credit(full_mesh: Mesh) -> None:
    connection = account(full_mesh, 0, "backend@iot").blocking()
    try:
        replies = connection.create_receiver(None, dynamic=True, credit=0)
        reply_to = replies.link.remote_source.address
        requests = connection.create_sender("$management")
        request = Message(
            properties={"operation": "READ", "type": PREFIX + "router"},
            reply_to=reply_to,
            correlation_id="held-1",
        )
        requests.send(request)  # returns once the router has settled it: the reply is made
        replies.flow(1)
        reply = replies.receive(timeout=10)  # the router sends replies presettled
    finally:
        connection.close()
    assert reply.correlation_id == "held-1"
    assert reply.properties["statusCode"] == 200 and reply.body["id"] == "test-router-0"


def test_unknown_operation_and_attribute(full_mesh: Mesh) -> None:
    with management(full_mesh, 0) as client:
        create = client.call(
            Message(properties={"operation": "GET-LOG", "type": PREFIX + "listener"}, body={})
        )
        unknown = client.call(
            Message(
                properties={"operation": "QUERY", "entityType": "listener"},
                body={"attributeNames": ["port", "nope"]},
            )
        )
    assert create.properties["statusCode"] == 501
    assert unknown.properties["statusCode"] == 404
    assert "Unknown attributes ['nope']" in unknown.properties["statusDescription"]


def test_sync_client_still_works(full_mesh: Mesh) -> None:
    """proton's SyncRequestResponse (what qdmanage uses) gets its reply by correlation id."""
    connection = account(full_mesh, 0, "backend@iot").blocking()
    try:
        client = SyncRequestResponse(connection, "$management")
        reply = node_request(client, "QUERY", entityType="router.address")
    finally:
        connection.close()
    assert "subscriberCount" in reply.body["attributeNames"]
