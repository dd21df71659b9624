"""Which brokers hold which addresses: rendezvous (highest random weight) hashing.

Adding an address never moves another one, and adding a broker moves only the share
that lands on it, so a redeploy does not strand messages on a broker that no longer
serves their queue.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence


def _score(candidate: str, key: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{candidate}\0{key}".encode()).digest()[:8], "big")


def rank(candidates: Sequence[str], key: str, count: int) -> list[str]:
    """The `count` best candidates for `key`, best first; stable across runs and machines."""
    ordered = sorted(candidates, key=lambda c: (-_score(c, key), c))
    return ordered[:count]
