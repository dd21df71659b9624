"""What the pages show, gathered from the control plane: the model (git + runtime part),
each router's management (connections, links) and the brokers (messages stored)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from enmesh.compile.layout import STANDARD_BROKER_VHOST, standard_broker_name
from enmesh.console.mesh import (
    CONNECTION_COLUMNS,
    LINK_COLUMNS,
    Management,
    ManagementLinks,
    MeshError,
    Router,
    is_client,
)
from enmesh.control.brokers import BrokerError, queue_depths
from enmesh.control.target import Target
from enmesh.model import Address as ModelAddress
from enmesh.model import Model, SpaceType, Tenant

log = logging.getLogger("enmesh.console")
STORED = {"queue", "topic", "subscription", "deadletter"}


@dataclass
class RouterView:
    router: Router
    connections: list[dict[str, Any]] = field(default_factory=list)
    links: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None


def read_routers(routers: Iterable[Router], links: ManagementLinks) -> list[RouterView]:
    """Connections and links of every router, read in parallel (the session's management
    connection to each); a router that cannot be read says so instead of failing the page."""

    def query(management: Management) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        return (
            management.query("connection", CONNECTION_COLUMNS),
            management.query("router.link", LINK_COLUMNS),
        )

    def fill(view: RouterView, found: tuple[list[dict[str, Any]], list[dict[str, Any]]]) -> None:
        view.connections, view.links = found

    return _read_each(routers, links, query, RouterView, fill)


@dataclass
class MeshRouter:
    router: Router
    nodes: list[dict[str, Any]] = field(default_factory=list)  # routers it reaches
    peers: list[dict[str, Any]] = field(default_factory=list)  # its inter-router connections
    error: str | None = None


def read_mesh(routers: Iterable[Router], links: ManagementLinks) -> list[MeshRouter]:
    """Each router's view of the mesh (router.node, inter-router connections): the
    administrator's (a tenant's management sees nothing of the mesh)."""

    def query(management: Management) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        nodes = management.query("router.node", ["id", "nextHop", "cost", "linkState"])
        connections = management.query("connection", CONNECTION_COLUMNS)
        return nodes, [c for c in connections if c.get("role") == "inter-router"]

    def fill(view: MeshRouter, found: tuple[list[dict[str, Any]], list[dict[str, Any]]]) -> None:
        view.nodes, view.peers = found

    return _read_each(routers, links, query, MeshRouter, fill)


Rows = list[dict[str, Any]]
View = TypeVar("View", RouterView, MeshRouter)


def _read_each(
    routers: Iterable[Router],
    links: ManagementLinks,
    query: Callable[[Management], tuple[Rows, Rows]],
    make: Callable[[Router], View],
    fill: Callable[[View, tuple[Rows, Rows]], None],
) -> list[View]:
    """`query` every router at once (one thread each); a router that cannot be read says
    so in its view instead of failing the page."""

    def read(router: Router) -> View:
        view = make(router)
        try:
            fill(view, links.use(router, query, read=True))
        except MeshError as exc:
            view.error = str(exc)
        return view

    routers = list(routers)
    with ThreadPoolExecutor(max(1, len(routers))) as pool:
        return list(pool.map(read, routers))


def client_connections(views: list[RouterView], space: str | None) -> list[RouterView]:
    """Only clients' connections (no inter-router or broker ones, not the console's own
    reads), of `space` if given."""
    for view in views:
        view.connections = [
            c
            for c in view.connections
            if is_client(c) and (space is None or c.get("tenant") == space)
        ]
        ids = {str(c["identity"]) for c in view.connections}
        view.links = [link for link in view.links if str(link.get("connectionId")) in ids]
    return views


@dataclass(frozen=True)
class AddressRow:
    address: str
    type: str
    plan: str
    settings: str
    added: bool  # by the runtime part (the console), so the console may delete it
    consumers: int
    producers: int
    stored: int | None  # None: not stored, or the broker could not be read
    rates: tuple[float, float] | None = None  # messages/s in, out (Prometheus), if known


def stored_messages(target: Target, tenant: Tenant) -> dict[str, int] | None:
    """Queue name -> messages ready and unacknowledged, from every broker of the stack;
    None (unknown, never 0) when a broker cannot be read."""
    vhost = STANDARD_BROKER_VHOST if tenant.space.spec.type is SpaceType.STANDARD else tenant.name
    found: dict[str, int] = {}
    for ctl in target.brokers:
        try:
            for (_, queue), count in queue_depths(ctl, [vhost]).items():
                found[queue] = found.get(queue, 0) + count
        except BrokerError as exc:
            log.warning("messages stored unknown: broker %s: %s", ctl.name, exc)
            return None
    return found


def _queue(tenant: Tenant, address: str) -> str:
    if tenant.space.spec.type is SpaceType.STANDARD:
        return standard_broker_name(tenant.name, address)
    return address


def endpoint_links(space: str, views: list[RouterView]) -> dict[str, list[dict[str, Any]]]:
    """Address (without the space) -> its endpoint links on every router, each with the
    `router` it is on: one pass over the links, whatever the number of addresses."""
    prefix, found = f"{space}/", dict[str, list[dict[str, Any]]]()
    for view in views:
        for link in view.links:
            # qdrouterd's hash key: class and phase, then the address (M0iot/x, M1iot/x)
            key = str(link.get("owningAddr") or "")[2:]
            if link.get("linkType") == "endpoint" and key.startswith(prefix):
                entry = {**link, "router": view.router.id}
                found.setdefault(key.removeprefix(prefix), []).append(entry)
    return found


def is_stored(address: ModelAddress) -> bool:
    return address.spec.type.value in STORED


def address_rows(
    tenant: Tenant,
    added: set[str],
    views: list[RouterView],
    stored: dict[str, int],
    rates: dict[str, tuple[float, float]] | None = None,
    *,
    addresses: list[ModelAddress] | None = None,
) -> list[AddressRow]:
    """The rows of `addresses` (default: all the space's), e.g. one page of them."""
    rows = []
    by_address = endpoint_links(tenant.name, views)
    for address in tenant.addresses if addresses is None else addresses:
        spec = address.spec
        links = by_address.get(spec.address, [])
        settings = ", ".join(
            f"{name} {value}"
            for name, value in (
                ("TTL", spec.ttlSeconds and f"{spec.ttlSeconds}s"),
                ("max deliveries", spec.maxDeliveries),
                ("dead letters to", spec.deadLetterAddress),
                ("topic", spec.topic),
            )
            if value
        )
        rows.append(
            AddressRow(
                address=spec.address,
                type=spec.type.value,
                plan=spec.plan,
                settings=settings,
                added=address.name in added,
                consumers=sum(1 for link in links if link.get("linkDir") == "out"),
                producers=sum(1 for link in links if link.get("linkDir") == "in"),
                stored=stored.get(_queue(tenant, spec.address)) if is_stored(address) else None,
                rates=None if rates is None else rates.get(spec.address, (0.0, 0.0)),
            )
        )
    return rows


def stored_count(stored: dict[str, int], tenant: Tenant, address: str) -> int:
    """The messages `address` holds, from `stored_messages`'s count."""
    return stored.get(_queue(tenant, address), 0)


def visible_tenants(model: Model, space: str | None) -> list[Tenant]:
    return [t for t in model.tenants if space is None or t.name == space]
