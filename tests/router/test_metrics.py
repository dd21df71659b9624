"""Delivery counters in /metrics and management, against running meshes.

Every delivery into and out of a router is counted on its address, by peer (client,
router, broker); an address keeps its series (and its last value) when its links go; a
router in the middle of a chain counts what it passes on; management's router.address
and router.link report the numbers /metrics does.
"""

from __future__ import annotations

import re
from typing import Any

from proton import Message
from proton.utils import SyncRequestResponse

from tests.router.conftest import SendN, account
from tests.support.amqp import run
from tests.support.mesh import Mesh

ADDRESS = "iot/telemetry"
SERIES = re.compile(r"^(\w+)\{([^}]*)\} (\S+)$")


def scrape(mesh: Mesh, router: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a router's /metrics, keyed by name and labels."""
    samples = {}
    for line in mesh.routers[router].metrics().splitlines():
        match = SERIES.match(line)
        if match:
            labels = frozenset(re.findall(r'(\w+)="([^"]*)"', match[2]))
            samples[match[1], labels] = float(match[3])
    return samples


def flow(samples: dict[Any, float], router: int, direction: str, peer: str) -> float | None:
    """enmesh_address_deliveries_total of ADDRESS, or None if the series is absent."""
    labels = {
        ("router", f"test-router-{router}"),
        ("address", ADDRESS),
        ("phase", "0"),
        ("direction", direction),
        ("peer", peer),
    }
    return samples.get(("enmesh_address_deliveries_total", frozenset(labels)))


def address_row(mesh: Mesh, router: int, key: str = ADDRESS) -> dict[str, Any]:
    """The router.address row of `key`, as a management QUERY reports it (as the stack's
    administrator would see it: backend@iot's manage right covers iot/)."""
    connection = account(mesh, router, "backend@iot").blocking()
    try:
        client = SyncRequestResponse(connection, "$management")
        reply = client.call(
            Message(
                properties={
                    "operation": "QUERY",
                    "type": "org.amqp.management",
                    "entityType": "org.apache.qpid.dispatch.router.address",
                },
                body={"attributeNames": []},
            )
        )
    finally:
        connection.close()
    names = reply.body["attributeNames"]
    rows = [dict(zip(names, row, strict=True)) for row in reply.body["results"]]
    return next(row for row in rows if row["name"] == f"M0{key}")  # qdrouterd's hash key


def send(mesh: Mesh, total: int, producer_at: int, consumer_at: int) -> None:
    scenario = run(SendN(mesh, total, producer_at, consumer_at), timeout=60)
    assert scenario.errors == [] and scenario.received == total


def test_client_ingress_is_counted_exactly_and_matches_management(full_mesh: Mesh) -> None:
    """N messages from a client into router 0 are N more ingress there, in /metrics and in
    management, after the client has gone (the old router counted only open links: 0)."""
    before = scrape(full_mesh, 0)
    row_before = address_row(full_mesh, 0)
    total = 37
    send(full_mesh, total, producer_at=0, consumer_at=2)
    after = scrape(full_mesh, 0)
    row_after = address_row(full_mesh, 0)
    ingress_before = flow(before, 0, "in", "client") or 0.0
    assert flow(after, 0, "in", "client") == ingress_before + total
    assert row_after["deliveriesIngress"] == row_before["deliveriesIngress"] + total
    assert flow(after, 0, "in", "client") == row_after["deliveriesIngress"]
    # Sent on to router 2 (the consumer's): transit, in both views.
    assert row_after["deliveriesTransit"] == row_before["deliveriesTransit"] + total
    assert flow(after, 0, "out", "router") == row_after["deliveriesTransit"]
    sample = ("enmesh_address_deliveries_ingress_total", "address", ADDRESS)
    assert (
        after[
            sample[0],
            frozenset({("router", "test-router-0"), (sample[1], sample[2]), ("phase", "0")}),
        ]
        == row_after["deliveriesIngress"]
    )


def test_address_without_consumer_keeps_its_series(full_mesh: Mesh) -> None:
    """Router 2's consumer of iot/telemetry has gone: its egress series stays, with its
    last value (the old router dropped the address and every series with it)."""
    send(full_mesh, 5, producer_at=0, consumer_at=2)
    samples = scrape(full_mesh, 2)
    egress = flow(samples, 2, "out", "client")
    assert egress is not None and egress >= 5
    assert address_row(full_mesh, 2)["subscriberCount"] == 0
    assert address_row(full_mesh, 2)["deliveriesEgress"] == egress
    # A configured address nobody has used has its series too, at 0.
    broadcast = frozenset(
        {("router", "test-router-1"), ("address", "iot/broadcast"), ("phase", "0")}
    )
    assert scrape(full_mesh, 1)[("enmesh_address_deliveries_ingress_total", broadcast)] == 0


def test_router_in_the_middle_counts_what_it_passes_on(chain: Mesh) -> None:
    """A - B - C: router 1 receives every message from router 0 and sends it on to 2."""
    before = scrape(chain, 1)
    row_before = address_row(chain, 1)
    total = 23
    send(chain, total, producer_at=0, consumer_at=2)
    after = scrape(chain, 1)
    for direction in ("in", "out"):
        assert (
            flow(after, 1, direction, "router")
            == (flow(before, 1, direction, "router") or 0) + total
        )
    row = address_row(chain, 1)
    assert row["deliveriesTransit"] == row_before["deliveriesTransit"] + total
    assert row["deliveriesIngress"] == row_before["deliveriesIngress"]  # no client here
    router_totals = scrape(chain, 1)
    key = ("enmesh_router_deliveries_transit_total", frozenset({("router", "test-router-1")}))
    assert router_totals[key] >= total
