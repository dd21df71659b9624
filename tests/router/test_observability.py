"""AMQP management on $management and Prometheus metrics, against a running mesh."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from proton import Message
from proton.utils import SyncRequestResponse

from tests.router.conftest import account
from tests.support.mesh import Mesh


@contextmanager
def management(mesh: Mesh, router: int, identity: str = "backend@iot") -> Iterator[Any]:
    connection = account(mesh, router, identity).blocking()
    try:
        yield SyncRequestResponse(connection, "$management")
    finally:
        connection.close()


def request(client: Any, operation: str, entity_type: str, **properties: Any) -> Message:
    message = Message(
        properties={"operation": operation, "type": entity_type, **properties},
        body={"attributeNames": []} if operation == "QUERY" else None,
    )
    response: Message = client.call(message)
    return response


def test_query_router_and_connections(full_mesh: Mesh) -> None:
    with management(full_mesh, 0) as client:
        router = request(client, "READ", "org.apache.qpid.dispatch.router")
        assert router.properties["statusCode"] == 200
        assert router.body["id"] == "test-router-0" and router.body["nodeCount"] == 3
        connections = request(client, "QUERY", "org.apache.qpid.dispatch.connection")
        names = connections.body["attributeNames"]
        rows = [dict(zip(names, row, strict=True)) for row in connections.body["results"]]
        mine = [r for r in rows if r["user"] == "backend@iot"]
        assert mine and mine[0]["tenant"] == "iot" and mine[0]["isAuthenticated"]
        # A tenant's manage right covers its own address space only: no mesh internals.
        assert {r["tenant"] for r in rows} == {"iot"}


def test_query_addresses_and_links_with_counters(full_mesh: Mesh) -> None:
    with management(full_mesh, 0) as client:
        links = request(client, "QUERY", "org.apache.qpid.dispatch.router.link")
        names = links.body["attributeNames"]
        rows = [dict(zip(names, row, strict=True)) for row in links.body["results"]]
        assert any(r["linkDir"] == "in" and r["owningAddr"] is None for r in rows)  # ours
        assert all("deliveryCount" in r for r in rows)
        unknown = request(client, "QUERY", "org.example.nothing")
        assert unknown.properties["statusCode"] == 400  # qdrouterd: "No such entity type"


def test_management_needs_the_manage_right(full_mesh: Mesh) -> None:
    with (
        pytest.raises(Exception, match="unauthorized-access"),
        management(full_mesh, 0, "device@iot") as client,
    ):
        request(client, "READ", "org.apache.qpid.dispatch.router")


def test_prometheus_metrics(full_mesh: Mesh) -> None:
    url = f"http://127.0.0.1:{full_mesh.routers[1].metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    assert "# TYPE enmesh_router_reachable_routers gauge" in text
    assert 'enmesh_router_reachable_routers{router="test-router-1"} 2' in text
    assert 'enmesh_router_connections{router="test-router-1",role="inter-router"} 2' in text
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(url.replace("/metrics", "/nope"), timeout=5)


def test_management_does_not_show_other_tenants(full_mesh: Mesh) -> None:
    acme = account(full_mesh, 0, "app@acme").blocking()
    try:
        acme.create_receiver("telemetry")  # an acme address with a consumer on this router
        with management(full_mesh, 0) as client:  # backend@iot, while acme is connected
            addresses = request(client, "QUERY", "org.apache.qpid.dispatch.router.address")
            connections = request(client, "QUERY", "org.apache.qpid.dispatch.connection")
    finally:
        acme.close()
    names = addresses.body["attributeNames"]
    seen = [dict(zip(names, row, strict=True))["name"] for row in addresses.body["results"]]
    assert seen and all(name[2:].startswith("iot/") for name in seen), seen  # M0iot/...
    cnames = connections.body["attributeNames"]
    tenants = {dict(zip(cnames, row, strict=True))["tenant"] for row in connections.body["results"]}
    assert tenants == {"iot"}
