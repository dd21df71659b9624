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
from enmesh.router import inventory_config, tally
from enmesh.router.demand import split_phase

if TYPE_CHECKING:
    from enmesh.router.connecting import ConnectionInfo
    from enmesh.router.forwarding import AddressState
    from enmesh.router.router import Router

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
    "deliveryCount unsettledCount presettledCount droppedPresettledCount acceptedCount "
    "rejectedCount releasedCount modifiedCount deliveriesDelayed1Sec deliveriesDelayed10Sec "
    "deliveriesStuck zeroCreditSeconds settleRate undeliveredCount"
)
ADDRESS_NOT_COUNTED = _zeros(
    "inProcess deliveriesIngressRouteContainer deliveriesEgressRouteContainer "
    "deliveriesRedirectedToFallback trackedDeliveries"
)
ROUTER_NOT_COUNTED = _zeros(
    "deliveriesDelayed1Sec deliveriesDelayed10Sec deliveriesStuck "
    "deliveriesIngressRouteContainer deliveriesEgressRouteContainer "
    "deliveriesRedirectedToFallback linksBlocked blockedLinkCount"
)
_ROUTER_TOTALS = {  # OutLink counter -> the router's total (of what it sent)
    "accepted": "acceptedDeliveries",
    "rejected": "rejectedDeliveries",
    "released": "releasedDeliveries",
    "modified": "modifiedDeliveries",
    "dropped": "droppedPresettledDeliveries",
    "presettled": "presettledDeliveries",
}


def known_addresses(router: Router) -> Iterator[tuple[str, str, AddressState | None]]:
    """(key, distribution, state or None) of every address the router knows: those it has
    seen (kept, with their counters, until forgotten) and every configured `prefix`
    (each phase of a waypoint), so their series exist before the first link."""
    configured: dict[str, str] = {}
    for entry in router.config.addresses:
        if entry.prefix is not None:
            phases = (0, 1) if entry.waypoint else (0,)
            for phase in phases:
                key = f"{entry.prefix}@{phase}" if entry.waypoint else entry.prefix
                configured[key] = str(entry.distribution)
    states = router.addresses
    for key in sorted(configured.keys() | states.keys()):
        state = states.get(key)
        distribution = str(state.distribution) if state is not None else configured[key]
        yield key, distribution, state


def router_entity(router: Router) -> dict[str, Any]:
    links = 0
    retired = router.retired
    totals = {total: retired.outcomes[field] for field, total in _ROUTER_TOTALS.items()}
    for _, link, _tracked in links_of(router):
        links += 1
        out = getattr(link, "enmesh_out", None)
        if out is not None:
            for field, total in _ROUTER_TOTALS.items():
                totals[total] += getattr(out, field)
    counts = list(retired.addresses)
    for state in router.addresses.values():
        for slot, value in enumerate(state.counts):
            counts[slot] += value
    flows = tally.address_attributes(counts)
    del flows["deliveriesToContainer"], flows["deliveriesFromContainer"]  # not router's
    totals |= flows
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
            "lastDlvSeconds": _seconds_since_last_delivery(conn.connection, now),
            "enableProtocolTrace": False,
            "bytesIn": conn.bytes_in,
            "bytesOut": conn.bytes_out,
        }


def _seconds_since_last_delivery(connection: Any, now: float) -> int | None:
    """Since a delivery last arrived on or left one of the connection's links (None: never)."""
    latest = None
    link = connection.link_head(0)
    while link is not None:
        tracked = getattr(link, "enmesh_out", None) or getattr(link, "enmesh_in", None)
        when = tracked.last_delivery if tracked is not None else None
        if when is not None and (latest is None or when > latest):
            latest = when
        link = link.next(0)
    return None if latest is None else int(now - latest)


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
            "owningAddr": hash_key(tracked.key) if tracked is not None else None,
            "adminStatus": "enabled",
            "operStatus": "up",
            "capacity": info.link_capacity,
            "creditAvailable": link.credit,
            "credit": link.credit,
            "peer": None,
            "priority": 0,
            **LINK_NOT_COUNTED,
        }
        counted = out if out is not None else inbound
        if counted is not None:
            entity |= {
                "deliveryCount": out.delivered if out is not None else counted.received,
                "acceptedCount": counted.accepted,
                "rejectedCount": counted.rejected,
                "releasedCount": counted.released,
                "modifiedCount": counted.modified,
                "presettledCount": counted.presettled,
            }
        if out is not None:
            entity |= {
                "droppedPresettledCount": out.dropped,
                "undeliveredCount": len(out.waiting),
                "unsettledCount": len(out.unsettled),
            }
        elif inbound is not None:
            entity |= {"undeliveredCount": len(inbound.held), "unsettledCount": link.unsettled}
        yield entity


def hash_key(key: str) -> str:
    """qdrouterd's name for an address: its hash key, class and phase before the address
    (`M0iot/telemetry`, a waypoint's `M1iot/commands`; `L$management` local). qdstat
    reads the class from the first character and the phase from the second."""
    address, phase = split_phase(key)
    if phase is not None:
        return f"M{phase}{address}"
    return f"L{key}" if key.startswith("$") else f"M0{key}"


def address_entities(router: Router) -> Iterator[dict[str, Any]]:
    return (entity for _, entity in address_rows(router))


def address_rows(router: Router, prefix: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """(the router's own key, the router.address entity) of every known address whose key
    starts with `prefix` (a tenant's `<space>/`)."""
    for key, distribution, state in known_addresses(router):
        if not key.startswith(prefix):
            continue
        consumers = state.consumers if state is not None else []
        remote = router.mesh.routers_with(key)
        name = hash_key(key)
        yield (
            key,
            {
                "identity": name,
                "name": name,
                "type": ADDRESS,
                "key": name,
                "distribution": distribution,  # a str: proton cannot encode the enum
                "subscriberCount": len(consumers),
                "remoteCount": len(remote),
                "containerCount": 0,
                **tally.address_attributes(state.counts if state is not None else tally.zeros()),
                "droppedPresettledDeliveries": sum(c.dropped for c in consumers),
                "undeliveredCount": sum(len(c.waiting) for c in consumers),
                "remoteHostRouters": [router for _, router in remote],
                "priority": -1,  # qdrouterd's "none set"
                "transitOutstanding": None,
                **ADDRESS_NOT_COUNTED,
            },
        )


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
        return [entity for _, entity in address_rows(router, prefix)]
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
