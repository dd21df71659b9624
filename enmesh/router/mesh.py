"""The mesh's view of itself: router advertisements, shortest paths, mobile addresses.

Every router floods a RouterAdvertisement (RA) when its neighbours or its local
addresses change. An RA is newer if its (instance, sequence) is greater: `instance` is
the router's start time, so a restarted router's sequence 1 still supersedes the old
life's sequence 900. A link counts only when both ends list each other, so a dead
router disappears as soon as one neighbour notices, even though its last RA lingers.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RouterAdvertisement:
    router: str
    instance: int
    sequence: int
    neighbours: frozenset[str]
    addresses: frozenset[str]  # routing keys with a destination on this router
    # Link routes whose broker is connected here (`<direction> <prefix or pattern>`):
    # other routers pass attaches for them here, hop by hop, as qdrouterd does.
    link_routes: frozenset[str] = frozenset()

    def newer_than(self, other: RouterAdvertisement | None) -> bool:
        return other is None or (self.instance, self.sequence) > (other.instance, other.sequence)

    def to_body(self) -> dict[str, Any]:
        return {
            "router": self.router,
            "instance": self.instance,
            "sequence": self.sequence,
            "neighbours": sorted(self.neighbours),
            "addresses": sorted(self.addresses),
            "linkRoutes": sorted(self.link_routes),
        }

    @classmethod
    def from_body(cls, body: Any) -> RouterAdvertisement:
        """Parse an RA from a control message body; ValueError if it is not one."""
        if not isinstance(body, dict):
            raise ValueError("router advertisement must be a map")
        try:
            return cls(
                router=str(body["router"]),
                instance=int(body["instance"]),
                sequence=int(body["sequence"]),
                neighbours=frozenset(str(n) for n in body["neighbours"]),
                addresses=frozenset(str(a) for a in body["addresses"]),
                # Absent from a router of an older release: it offers none.
                link_routes=frozenset(str(r) for r in body.get("linkRoutes", ())),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed router advertisement: {exc}") from exc


@dataclass
class Routes:
    """Result of a shortest-path computation from this router."""

    next_hop: dict[str, str] = field(default_factory=dict)  # destination -> neighbour
    cost: dict[str, int] = field(default_factory=dict)  # destination -> hops


class Mesh:
    """The link-state database of one router."""

    def __init__(self, router_id: str, instance: int) -> None:
        self.router_id = router_id
        self.instance = instance
        self._sequence = 0
        self.neighbours: set[str] = set()  # routers with a live inter-router connection
        self.local_addresses: frozenset[str] = frozenset()
        self.local_link_routes: frozenset[str] = frozenset()
        self.advertisements: dict[str, RouterAdvertisement] = {}
        self.routes = Routes()
        # routers_with runs for every routed message; its answer changes only on recompute.
        self._with_key: dict[str, list[tuple[int, str]]] = {}
        self.own = self._advertise()

    def _advertise(self) -> RouterAdvertisement:
        self._sequence += 1
        ra = RouterAdvertisement(
            self.router_id,
            self.instance,
            self._sequence,
            frozenset(self.neighbours),
            self.local_addresses,
            self.local_link_routes,
        )
        self.advertisements[self.router_id] = ra
        return ra

    def update_local(
        self,
        neighbours: Iterable[str] | None = None,
        addresses: Iterable[str] | None = None,
        link_routes: Iterable[str] | None = None,
    ) -> RouterAdvertisement | None:
        """Change what this router advertises; returns the new RA if anything changed."""
        new_neighbours = set(neighbours) if neighbours is not None else self.neighbours
        new_addresses = frozenset(addresses) if addresses is not None else self.local_addresses
        new_routes = frozenset(link_routes) if link_routes is not None else self.local_link_routes
        if (new_neighbours, new_addresses, new_routes) == (
            self.neighbours,
            self.local_addresses,
            self.local_link_routes,
        ):
            return None
        self.neighbours = new_neighbours
        self.local_addresses = new_addresses
        self.local_link_routes = new_routes
        self.own = self._advertise()
        self.recompute()
        return self.own

    def accept(self, ra: RouterAdvertisement) -> bool:
        """Store a received RA if it is newer; returns whether it was (and so must flood)."""
        if ra.router == self.router_id:
            return False  # our own, come back around the mesh
        if not ra.newer_than(self.advertisements.get(ra.router)):
            return False
        self.advertisements[ra.router] = ra
        self.recompute()
        return True

    def _linked(self, a: str, b: str) -> bool:
        ra, rb = self.advertisements.get(a), self.advertisements.get(b)
        return ra is not None and rb is not None and b in ra.neighbours and a in rb.neighbours

    def recompute(self) -> Routes:
        """Dijkstra (unit costs) over two-way links, remembering each path's first hop."""
        routes = Routes()
        queue: list[tuple[int, str, str]] = [
            (1, n, n) for n in sorted(self.neighbours) if self._linked(self.router_id, n)
        ]
        heapq.heapify(queue)
        seen = {self.router_id}
        while queue:
            cost, router, first_hop = heapq.heappop(queue)
            if router in seen:
                continue
            seen.add(router)
            routes.next_hop[router] = first_hop
            routes.cost[router] = cost
            ra = self.advertisements.get(router)
            for neighbour in sorted(ra.neighbours if ra else ()):
                if neighbour not in seen and self._linked(router, neighbour):
                    heapq.heappush(queue, (cost + 1, neighbour, first_hop))
        self.routes = routes
        self._with_key.clear()
        return routes

    def reachable(self) -> list[str]:
        return sorted(self.routes.next_hop)

    def routers_with(self, key: str) -> list[tuple[int, str]]:
        """Reachable remote routers with a destination for `key`, as (cost, router)."""
        found = self._with_key.get(key)
        if found is None:
            found = self._with_key[key] = sorted(
                (self.routes.cost[router], router)
                for router in self.routes.next_hop
                if key in self.advertisements[router].addresses
            )
        return found

    def routers_with_link_route(self, route: str) -> list[tuple[int, str]]:
        """Reachable remote routers whose broker serves link route `route`, nearest first."""
        return sorted(
            (self.routes.cost[router], router)
            for router in self.routes.next_hop
            if route in self.advertisements[router].link_routes
        )
