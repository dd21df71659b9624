"""Read-only views of a router's state: what management and metrics report.

Entity and attribute names follow qdrouterd's management schema, so tools written
for Qpid Dispatch Router (qdmanage-style QUERY/READ) find what they expect.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from proton import SASL

from enmesh import __version__
from enmesh.router import inventory_config

if TYPE_CHECKING:
    from enmesh.router.router import ConnectionInfo, Router

ROUTER = "org.apache.qpid.dispatch.router"
CONNECTION = "org.apache.qpid.dispatch.connection"
LINK = "org.apache.qpid.dispatch.router.link"
ADDRESS = "org.apache.qpid.dispatch.router.address"
NODE = "org.apache.qpid.dispatch.router.node"


# Counters qdrouterd keeps and enmesh-router does not: reported as 0 so that tools doing
# arithmetic on them (qdstat) work; the counted ones overwrite these.
def _zeros(names: str) -> dict[str, int]:
    return dict.fromkeys(names.split(), 0)


LINK_NOT_COUNTED = _zeros(
    "unsettledCount presettledCount droppedPresettledCount acceptedCount rejectedCount "
    "releasedCount modifiedCount deliveriesDelayed1Sec deliveriesDelayed10Sec "
    "deliveriesStuck zeroCreditSeconds settleRate undeliveredCount"
)
ADDRESS_NOT_COUNTED = _zeros(
    "inProcess deliveriesTransit deliveriesToContainer deliveriesFromContainer "
    "deliveriesIngressRouteContainer deliveriesEgressRouteContainer "
    "deliveriesRedirectedToFallback trackedDeliveries"
)
ROUTER_NOT_COUNTED = _zeros(
    "presettledDeliveries deliveriesDelayed1Sec deliveriesDelayed10Sec deliveriesStuck "
    "deliveriesTransit deliveriesIngressRouteContainer deliveriesEgressRouteContainer "
    "deliveriesRedirectedToFallback linksBlocked blockedLinkCount"
)
_ROUTER_TOTALS = {  # OutLink counter -> the router's total
    "delivered": "deliveriesEgress",
    "accepted": "acceptedDeliveries",
    "rejected": "rejectedDeliveries",
    "released": "releasedDeliveries",
    "modified": "modifiedDeliveries",
    "dropped": "droppedPresettledDeliveries",
}


def router_entity(router: Router) -> dict[str, Any]:
    links = 0
    totals = dict.fromkeys(_ROUTER_TOTALS.values(), 0) | {"deliveriesIngress": 0}
    for _, link, _tracked in links_of(router):
        links += 1
        out, inbound = getattr(link, "enmesh_out", None), getattr(link, "enmesh_in", None)
        if out is not None:
            for field, total in _ROUTER_TOTALS.items():
                totals[total] += getattr(out, field)
        elif inbound is not None:
            totals["deliveriesIngress"] += inbound.received
    return (
        inventory_config.settings(router.config.router, "router")
        | ROUTER_NOT_COUNTED
        | totals
        | {
            "workerThreads": 1,
            "identity": router.id,
            "name": router.id,
            "type": ROUTER,
            "id": router.id,
            "area": "0",
            "version": __version__,
            "addrCount": len(router.addresses),
            "linkCount": links,
            "linkRouteCount": len(router.config.link_routes),
            "autoLinkCount": len(router.config.auto_links),
            "connectionCount": sum(1 for _ in connection_entities(router)),
            "nodeCount": len(router.mesh.reachable()) + 1,
            "uptimeSeconds": int(time.time() - router.started_at),
        }
    )


def connection_entities(router: Router) -> Iterator[dict[str, Any]]:
    """Connections whose peer has sent its open, as qdrouterd lists them."""
    now = time.monotonic()
    for identity, conn in sorted(router.connections.items()):
        info: ConnectionInfo = conn.context["info"]
        if info.opened_at is None:
            continue
        transport = conn.transport
        tls = getattr(transport, "_ssl", None)  # proton sets it only when there is TLS
        encrypted = bool(transport.encrypted)
        yield {
            "identity": str(identity),
            "name": f"connection/{conn.peer}",
            "type": CONNECTION,
            "host": conn.peer,
            "role": str(info.role),
            "protocol": "amqp",
            "dir": "out" if info.outgoing else "in",
            "container": conn.connection.remote_container or None,
            "sasl": SASL(transport).mech or None,
            "isAuthenticated": bool(transport.authenticated),
            "user": info.user or None,
            "isEncrypted": encrypted,
            "sslProto": tls.protocol_name() if tls is not None and encrypted else None,
            "sslCipher": tls.cipher_name() if tls is not None and encrypted else None,
            "properties": connection_properties(conn.connection.remote_properties),
            "sslSsf": None if encrypted else 0,  # proton's Python API does not give it
            "tenant": info.vhost_name or None,
            "ssl": tls is not None and encrypted,
            "opened": True,
            "active": True,
            "adminStatus": "enabled",
            "operStatus": "closing" if conn.closed else "up",
            "uptimeSeconds": int(now - info.opened_at),
            "lastDlvSeconds": None,
            "enableProtocolTrace": False,
            "bytesIn": conn.bytes_in,
            "bytesOut": conn.bytes_out,
        }


def connection_properties(remote: Mapping[Any, Any] | None) -> dict[str, Any]:
    """The peer's open properties as qdrouterd reports them: symbol or string keys, string
    (symbol or unicode) and integer values; values of other types are left out."""
    shown: dict[str, Any] = {}
    for key, value in (remote or {}).items():
        if not isinstance(key, str):
            continue
        if isinstance(value, str):  # a proton symbol is a str
            shown[str(key)] = str(value)
        elif isinstance(value, int) and not isinstance(value, bool):
            shown[str(key)] = int(value)
    return shown


def links_of(router: Router) -> Iterator[tuple[int, Any, Any]]:
    """(connection id, proton link, enmesh OutLink/InLink or None) for every open link."""
    for identity, conn in sorted(router.connections.items()):
        link = conn.connection.link_head(0)
        while link is not None:
            yield (
                identity,
                link,
                getattr(link, "enmesh_out", None) or getattr(link, "enmesh_in", None),
            )
            link = link.next(0)


def link_entities(router: Router) -> Iterator[dict[str, Any]]:
    for number, (connection_id, link, tracked) in enumerate(links_of(router), start=1):
        info: ConnectionInfo = router.connections[connection_id].context["info"]
        out = getattr(link, "enmesh_out", None)
        inbound = getattr(link, "enmesh_in", None)
        entity: dict[str, Any] = {
            "identity": str(number),
            "name": link.name,
            "type": LINK,
            "linkName": link.name,
            "linkType": "inter-router" if info.role == "inter-router" else "endpoint",
            "linkDir": "out" if link.is_sender else "in",
            "connectionId": str(connection_id),
            "owningAddr": tracked.key if tracked is not None else None,
            "adminStatus": "enabled",
            "operStatus": "up",
            "capacity": info.link_capacity,
            "creditAvailable": link.credit,
            "credit": link.credit,
            "peer": None,
            "priority": 0,
            **LINK_NOT_COUNTED,
        }
        if out is not None:
            entity |= {
                "deliveryCount": out.delivered,
                "acceptedCount": out.accepted,
                "rejectedCount": out.rejected,
                "releasedCount": out.released,
                "modifiedCount": out.modified,
                "droppedPresettledCount": out.dropped,
                "undeliveredCount": len(out.waiting),
                "unsettledCount": len(out.unsettled),
            }
        elif inbound is not None:
            entity |= {"deliveryCount": inbound.received, "undeliveredCount": len(inbound.held)}
        yield entity


def address_entities(router: Router) -> Iterator[dict[str, Any]]:
    for key, state in sorted(router.addresses.items()):
        yield {
            "identity": key,
            "name": key,
            "type": ADDRESS,
            "key": key,
            "distribution": str(state.distribution),  # an enum proton cannot encode
            "subscriberCount": len(state.consumers),
            "remoteCount": len(router.mesh.routers_with(key)),
            "containerCount": 0,
            "deliveriesIngress": sum(p.received for p in state.producers),
            "deliveriesEgress": sum(c.delivered for c in state.consumers),
            "droppedPresettledDeliveries": sum(c.dropped for c in state.consumers),
            "undeliveredCount": sum(len(c.waiting) for c in state.consumers),
            "remoteHostRouters": [router for _, router in router.mesh.routers_with(key)],
            "priority": -1,  # qdrouterd's "none set"
            "transitOutstanding": None,
            **ADDRESS_NOT_COUNTED,
        }


def entities(router: Router, entity_type: str, tenant: str | None = None) -> list[dict[str, Any]]:
    """Entities of a type; with `tenant`, only what belongs to that address space.

    A tenant's manage right covers its own connections, links and addresses: nothing of
    other tenants, and nothing of the mesh (inter-router or broker connections).
    """
    if entity_type == ROUTER:
        return [router_entity(router)]
    if entity_type == CONNECTION:
        found = list(connection_entities(router))
        return [c for c in found if tenant is None or c["tenant"] == tenant]
    if entity_type == LINK:
        allowed = _tenant_connections(router, tenant)
        return [
            link
            for link in link_entities(router)
            if allowed is None or link["connectionId"] in allowed
        ]
    if entity_type == ADDRESS:
        prefix = f"{tenant}/" if tenant is not None else ""
        return [a for a in address_entities(router) if a["name"].startswith(prefix)]
    if tenant is not None:  # the mesh's nodes and the router's configuration
        return []
    if entity_type == NODE:
        return list(node_entities(router))
    return inventory_config.entities(router, entity_type)


def node_entities(router: Router) -> Iterator[dict[str, Any]]:
    """The other routers this one can reach, as qdrouterd's router.node."""
    routes = router.mesh.routes
    for index, node in enumerate(router.mesh.reachable(), start=1):
        hop = routes.next_hop[node]
        yield {
            "identity": f"router.node/{node}",
            "name": f"router.node/{node}",
            "type": NODE,
            "id": node,
            "index": index,
            "cost": routes.cost.get(node),
            "nextHop": None if hop == node else hop,
            "linkState": sorted(router.mesh.advertisements[node].neighbours)
            if node in router.mesh.advertisements
            else [],
        }


def _tenant_connections(router: Router, tenant: str | None) -> set[str] | None:
    if tenant is None:
        return None
    return {
        str(identity)
        for identity, conn in router.connections.items()
        if conn.context["info"].vhost_name == tenant
    }
