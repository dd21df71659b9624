"""Wildcard subscriptions: MQTT topic filters matched against the model's addresses.

The router has no pattern addresses a client can attach to, so the gateway expands a
filter itself: `+` matches one level, `#` the rest (the parent level included), as in
MQTT 4.7; levels are separated by `/`, a legal address character. A filter matches the
multicast and topic addresses of the device's address space (publish-subscribe types:
a wildcard over queues or anycast addresses would make one device compete for every
message of each). The addresses come from `mqtt/addresses.json`, which the compiler
writes beside the routers' configs and `enmesh apply` keeps current; the gateway reads it
again when it changes, so an address added to the model reaches the subscriptions whose
filters match it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from pathlib import Path

log = logging.getLogger("enmesh.mqtt.topics")
ADDRESSES_FILE = "mqtt/addresses.json"
WILDCARD_TYPES = frozenset({"multicast", "topic"})


def is_wildcard(topic_filter: str) -> bool:
    return "+" in topic_filter or "#" in topic_filter


def matches(topic_filter: str, topic: str) -> bool:
    levels, names = topic_filter.split("/"), topic.split("/")
    if topic.startswith("$") and levels[0] in ("+", "#"):
        return False  # MQTT-4.7.2-1: wildcards do not reach $ topics
    for index, level in enumerate(levels):
        if level == "#":
            return True
        if index >= len(names) or (level != "+" and level != names[index]):
            return False
    return len(levels) == len(names)


class AddressIndex:
    """Each space's addresses and their types, read from the compiled file and read
    again when it changes (`refresh`)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self._spaces: dict[str, dict[str, str]] = {}
        self.refresh()

    @property
    def enabled(self) -> bool:
        return self.path is not None

    def refresh(self) -> bool:
        """Read the file again if it changed; True if it did (and was read)."""
        if self.path is None:
            return False
        try:
            status = self.path.stat()
            stamp = (status.st_mtime_ns, status.st_size)
            if stamp == self._stamp:
                return False
            spaces = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            log.warning(
                "cannot read the address index %s: %s; keeping what was read", self.path, exc
            )
            return False
        self._stamp = stamp
        self._spaces = {str(s): {str(a): str(t) for a, t in v.items()} for s, v in spaces.items()}
        return True

    def kind(self, space: str, address: str) -> str | None:
        """The address's type (anycast, multicast, queue, ...), if the index has it."""
        return self._spaces.get(space, {}).get(address)

    def matching(self, space: str, filters: Iterable[str]) -> set[str]:
        """The space's publish-subscribe addresses any of `filters` matches."""
        wanted = list(filters)
        return {
            address
            for address, kind in self._spaces.get(space, {}).items()
            if kind in WILDCARD_TYPES and any(matches(f, address) for f in wanted)
        }
