"""Delivery outcomes as values, and how unsettled multicast combines its copies' outcomes.

An outcome must outlive the delivery it came from: a multicast copy's consumer settles
it (and proton frees it) long before the last copy's consumer does, yet the producer's
outcome is decided only then. So the router keeps an `Outcome` (state and fields), never
a proton Delivery, once a consumer has settled.

Unsettled multicast as qdrouterd 1.19 does it (src/router_core/delivery.c
qdr_delivery_mcast_outbound_disposition_CT and _settled_CT; `allowUnsettledMulticast` is
deprecated there and read by nothing): every copy goes out unsettled, and the producer's
delivery is settled once every copy has a terminal outcome and is settled, with the
outcome of highest priority: rejected > accepted > modified > released. A copy sent to
the next router counts once: that router settles it only when its own copies are done.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from proton import Condition, Delivery, Disposition

from enmesh.router import rawproton

ACCEPTED, REJECTED = Disposition.ACCEPTED, Disposition.REJECTED
RELEASED, MODIFIED = Disposition.RELEASED, Disposition.MODIFIED
# qdrouterd's ad hoc priority of terminal outcomes across multicast copies.
_PRIORITY: dict[int, int] = {int(REJECTED): 3, int(ACCEPTED): 2, int(MODIFIED): 1, int(RELEASED): 0}


@dataclass(frozen=True, slots=True)
class Outcome:
    """A terminal (or received) state and its fields, detached from any delivery."""

    state: int
    condition: Condition | None = None
    failed: bool = False
    undeliverable: bool = False
    annotations: dict[str, Any] | None = None
    section_number: int = 0
    section_offset: int = 0

    @classmethod
    def of(cls, delivery: Delivery, state: int | None = None) -> Outcome:
        """The peer's disposition of `delivery`, as it stands now (`state`: its remote
        state, when the caller has read it)."""
        if state is None:
            state = rawproton.remote_state(delivery)
        if state in _PLAIN:
            return _PLAIN[state]
        remote = delivery.remote
        if state == MODIFIED:
            annotations = remote.annotations
            return cls(
                state,
                failed=True,  # qdrouterd 1.19 sets delivery-failed on every modified it passes
                undeliverable=bool(remote.undeliverable),
                annotations=cast(dict[str, Any], annotations) if annotations else None,
            )
        if state == REJECTED:
            return cls(state, condition=remote.condition)
        if state == Disposition.RECEIVED:
            return cls(
                state, section_number=remote.section_number, section_offset=remote.section_offset
            )
        return cls(state)

    def apply(self, target: Delivery) -> None:
        """Set this outcome as `target`'s local disposition (the caller settles)."""
        if self.state in _PLAIN and self == _PLAIN[self.state]:
            rawproton.update(target, self.state)  # no fields to write first
            return
        local = target.local
        if self.state == REJECTED and self.condition is not None:
            local.condition = self.condition
        elif self.state == MODIFIED:
            local.failed = self.failed
            local.undeliverable = self.undeliverable
            if self.annotations is not None:
                local.annotations = self.annotations
        elif self.state == Disposition.RECEIVED:
            local.section_number = self.section_number
            local.section_offset = self.section_offset
        if self.state:
            target.update(self.state)


# The outcomes without fields, made once: most consumers accept, and each outcome
# would otherwise be a new object per message.
_PLAIN = {int(state): Outcome(state) for state in (ACCEPTED, RELEASED)}
FAILED = Outcome(MODIFIED, failed=True)  # in doubt: the copy may have been processed


class Fanout:
    """The copies of one unsettled multicast delivery, until the last one is settled.

    `pending` starts at 1 for the router itself while it is still making copies, so a
    copy settled at once cannot settle the producer's delivery before the others exist.
    """

    def __init__(self, settle: Callable[[Outcome], None]) -> None:
        self._settle = settle
        self.pending = 1
        self.best: Outcome | None = None

    def add_copy(self) -> None:
        self.pending += 1

    def copy_settled(self, outcome: Outcome | None) -> None:
        """One copy was settled with `outcome` (None: the router's own share, `close`)."""
        if self.pending <= 0:
            return
        if outcome is not None:
            rank = _PRIORITY.get(outcome.state, -1)
            if self.best is None or rank > _PRIORITY.get(self.best.state, -1):
                self.best = outcome
        self.pending -= 1
        if self.pending == 0:
            self._settle(self.best or Outcome(RELEASED))  # no copy went out: released

    def close(self) -> None:
        """Every copy has been made."""
        self.copy_settled(None)
