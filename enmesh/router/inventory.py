"""Read-only views of a router's state: what management and metrics report.

Entity and attribute names follow qdrouterd's management schema, so tools written
for Qpid Dispatch Router (qdmanage-style QUERY/READ) find what they expect.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from enmesh import __version__

if TYPE_CHECKING:
    from enmesh.router.router import ConnectionInfo, Router

ROUTER = "org.apache.qpid.dispatch.router"
CONNECTION = "org.apache.qpid.dispatch.connection"
LINK = "org.apache.qpid.dispatch.router.link"
ADDRESS = "org.apache.qpid.dispatch.router.address"
TYPES = (ROUTER, CONNECTION, LINK, ADDRESS)


def router_entity(router: Router) -> dict[str, Any]:
    links = sum(1 for _ in links_of(router))
    return {
        "identity": router.id,
        "name": router.id,
        "id": router.id,
        "mode": "interior",
        "version": __version__,
        "addrCount": len(router.addresses),
        "linkCount": links,
        "connectionCount": len(router.connections),
        "nodeCount": len(router.mesh.reachable()) + 1,
        "uptimeSeconds": int(time.time() - router.started_at),
    }


def connection_entities(router: Router) -> Iterator[dict[str, Any]]:
    for identity, conn in sorted(router.connections.items()):
        info: ConnectionInfo = conn.context["info"]
        transport = conn.transport
        yield {
            "identity": str(identity),
            "name": f"connection/{conn.peer}",
            "host": conn.peer,
            "role": str(info.role),
            "dir": "out" if info.outgoing else "in",
            "container": conn.connection.remote_container or "",
            "user": info.user or None,
            "tenant": info.vhost_name or None,
            "isAuthenticated": bool(transport.authenticated),
            "isEncrypted": bool(transport.encrypted),
            "opened": not conn.closed,
            "bytesIn": conn.bytes_in,
            "bytesOut": conn.bytes_out,
        }


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
            "linkName": link.name,
            "linkType": "inter-router" if info.role == "inter-router" else "endpoint",
            "linkDir": "out" if link.is_sender else "in",
            "connectionId": str(connection_id),
            "owningAddr": tracked.key if tracked is not None else None,
            "credit": link.credit,
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
            "distribution": state.distribution,
            "subscriberCount": len(state.consumers),
            "remoteCount": len(router.mesh.routers_with(key)),
            "containerCount": 0,
            "deliveriesIngress": sum(p.received for p in state.producers),
            "deliveriesEgress": sum(c.delivered for c in state.consumers),
            "droppedPresettledDeliveries": sum(c.dropped for c in state.consumers),
            "undeliveredCount": sum(len(c.waiting) for c in state.consumers),
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
    raise KeyError(entity_type)


def _tenant_connections(router: Router, tenant: str | None) -> set[str] | None:
    if tenant is None:
        return None
    return {
        str(identity)
        for identity, conn in router.connections.items()
        if conn.context["info"].vhost_name == tenant
    }
