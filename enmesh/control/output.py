"""The plan as text, like `terraform plan`: one block per component, a summary line.

Routers whose changes are the same (the address section is shared) are printed as one
block naming them all. Passwords never appear; a user's says only that it changed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from enmesh.control.plan import Action, BrokerPlan, Change, RouterPlan

_VERB = {
    Action.ADD: "add",
    Action.CHANGE: "change",
    Action.REMOVE: "remove",
    Action.REPLACE: "replace",
}


def change_lines(changes: Iterable[Change]) -> list[str]:
    lines = []
    for change in changes:
        name = change.kind if change.key == change.kind else f"{change.kind} {change.key}"
        lines.append(f"  {change.action.value:>3} {name}")
        lines.extend(f"        {detail}" for detail in change.details)
    return lines


def render(
    stack: str,
    routers: Sequence[RouterPlan],
    brokers: Sequence[BrokerPlan],
    users: Sequence[Change],
    notes: Sequence[str] = (),
) -> str:
    blocks: list[str] = []
    grouped: dict[tuple[Change, ...], list[str]] = {}
    for router in routers:
        if router.changes:
            grouped.setdefault(router.changes, []).append(router.id)
    for changes, ids in grouped.items():
        label = "router" if len(ids) == 1 else "routers"
        blocks.append("\n".join([f"{label} {', '.join(ids)}:", *change_lines(changes)]))
    for broker in brokers:
        if broker.changes:
            blocks.append("\n".join([f"broker {broker.name}:", *change_lines(broker.changes)]))
    if users:
        blocks.append("\n".join(["users:", *change_lines(users)]))
    counts = Counter(
        c.action
        for c in [
            *(c for r in routers for c in r.changes),
            *(c for b in brokers for c in b.changes),
            *users,
        ]
    )
    head = f"Plan for stack {stack!r}:"
    if not counts:
        return "\n".join([head, "  no changes: the stack runs the model.", *notes]) + "\n"
    summary = ", ".join(f"{counts[a]} to {_VERB[a]}" for a in Action if counts[a])
    return "\n\n".join([head, *blocks, f"Plan: {summary}.", *notes]) + "\n"
