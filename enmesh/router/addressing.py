"""Address configuration lookups: distribution, waypoint phases, link-route matching.

Addresses inside the router are tenant-prefixed (`iot/events`). qdrouterd semantics:
a `prefix` matches whole tokens (`iot/events` matches `iot/events` and `iot/events/x`
but not `iot/eventsx`); a `pattern` has tokens separated by `.` or `/`, `*` for one
token and `#` for any number. The longest matching prefix (or first pattern) wins.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol, TypeVar

SEPARATORS = "./"


class Matchable(Protocol):
    @property
    def prefix(self) -> str | None: ...
    @property
    def pattern(self) -> str | None: ...


M = TypeVar("M", bound="Matchable")


def prefix_matches(prefix: str, address: str) -> bool:
    return address == prefix or (
        address.startswith(prefix)
        and len(address) > len(prefix)
        and address[len(prefix)] in SEPARATORS
    )


@lru_cache(maxsize=4096)
def _pattern_regex(pattern: str) -> re.Pattern[str]:
    parts = []
    for token in re.split(r"([./])", pattern):
        if token == "*":
            parts.append(r"[^./]+")
        elif token == "#":
            parts.append(r".*")
        else:
            parts.append(re.escape(token))
    return re.compile("^" + "".join(parts) + "$")


def best_match(entries: Sequence[M], address: str) -> M | None:
    best: M | None = None
    best_length = -1
    for entry in entries:
        if entry.prefix is not None:
            if prefix_matches(entry.prefix, address) and len(entry.prefix) > best_length:
                best, best_length = entry, len(entry.prefix)
        elif (
            entry.pattern is not None
            and best is None
            and _pattern_regex(entry.pattern).match(address)
        ):
            best = entry
    return best


@dataclass(frozen=True)
class AddressSemantics:
    distribution: str  # balanced | closest | multicast
    waypoint: bool

    def key(self, address: str, phase: int) -> str:
        """Routing key: waypoint addresses have a phase before and after the broker."""
        return f"{address}@{phase}" if self.waypoint else address


DEFAULT_SEMANTICS = AddressSemantics("balanced", False)
