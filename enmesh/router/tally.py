"""Delivery counters: per address (by where deliveries came from and went to) and router totals.

Each address keeps one list of six integers that outlives every link on it, so its
series in /metrics and management never go back or vanish while the address is known.
A link is bound once to its address's list and a slot chosen by its connection's role;
the hot path is then one integer increment on objects it already has
(`link.tally[link.slot] += 1`). Outcome and per-link counters live on the links; when a
link goes, its counts are folded into the router's totals so those stay monotonic too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

IN_CLIENT, IN_ROUTER, IN_BROKER, OUT_CLIENT, OUT_ROUTER, OUT_BROKER = range(6)
SLOTS = 6
NORMAL, INTER_ROUTER, ROUTE_CONTAINER = "normal", "inter-router", "route-container"
_IN = {NORMAL: IN_CLIENT, INTER_ROUTER: IN_ROUTER, ROUTE_CONTAINER: IN_BROKER}
_OUT = {NORMAL: OUT_CLIENT, INTER_ROUTER: OUT_ROUTER, ROUTE_CONTAINER: OUT_BROKER}
# (slot, direction, peer) as /metrics labels them.
LABELS = (
    (IN_CLIENT, "in", "client"),
    (IN_ROUTER, "in", "router"),
    (IN_BROKER, "in", "broker"),
    (OUT_CLIENT, "out", "client"),
    (OUT_ROUTER, "out", "router"),
    (OUT_BROKER, "out", "broker"),
)
# Links not tied to an address (link routes, anonymous senders, before binding) count
# into this list, which nobody reads: it spares the hot path a None check.
NOWHERE: list[int] = [0] * SLOTS
OUTCOMES = ("accepted", "rejected", "released", "modified", "presettled", "dropped")


def zeros() -> list[int]:
    return [0] * SLOTS


def role_of(link: Any) -> str:
    """The role of the connection a proton link is on (set by the router on adoption)."""
    return str(getattr(link.connection, "enmesh_role", NORMAL))


def bind(counted: Any, counts: list[int], *, outgoing: bool) -> None:
    """Count `counted` (an OutLink or InLink) into an address's `counts`."""
    counted.tally = counts
    counted.slot = (_OUT if outgoing else _IN).get(role_of(counted.link), IN_CLIENT)


def address_attributes(counts: list[int]) -> dict[str, int]:
    """qdrouterd's router.address delivery counters from an address's counts."""
    return {
        "deliveriesIngress": counts[IN_CLIENT] + counts[IN_BROKER],
        "deliveriesEgress": counts[OUT_CLIENT] + counts[OUT_BROKER],
        "deliveriesTransit": counts[OUT_ROUTER],
        "deliveriesToContainer": counts[OUT_BROKER],
        "deliveriesFromContainer": counts[IN_BROKER],
    }


@dataclass
class Retired:
    """What links that are gone had counted, so the router's totals never go back."""

    received: int = 0  # deliveries in on links
    delivered: int = 0  # deliveries out on links
    outcomes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    addresses: list[int] = field(default_factory=zeros)  # of addresses forgotten

    def link_gone(self, counted: Any) -> None:
        """Fold a link's counters in, once (a link may be forgotten more than once).
        Outcomes are the router's totals of what it sent (qdrouterd counts those)."""
        if getattr(counted, "retired", False):
            return
        counted.retired = True
        if hasattr(counted, "delivered"):  # an OutLink
            self.delivered += counted.delivered
            for name in OUTCOMES:
                self.outcomes[name] += getattr(counted, name)
        else:
            self.received += counted.received

    def address_gone(self, counts: list[int]) -> None:
        for slot in range(SLOTS):
            self.addresses[slot] += counts[slot]
