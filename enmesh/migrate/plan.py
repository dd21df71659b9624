"""`enmesh migrate plan`: what exists on each stack and what a migration would move.

Read only. The model side comes from each stack's deploy description (tenants,
addresses with their types) and installed users; the stored side from each broker
(`rabbitmqctl list_queues`: messages ready plus unacknowledged, per queue).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from enmesh.control.brokers import BrokerError, queue_depths
from enmesh.migrate.ends import MigrateError, StackEnd

# Queue roles as the compiler names them: `<space>.<address>` for queue, subscription and
# deadletter addresses (a subscription `topic::name` is stored as `<space>.<name>`).
STORED_TYPES = ("queue", "subscription", "deadletter")


@dataclass(frozen=True)
class QueueState:
    vhost: str
    queue: str
    address: str  # `space/address`, or "" for a queue the model does not name
    type: str
    source_broker: str
    source_messages: int
    target_broker: str | None  # None: the target has no such queue
    target_messages: int

    @property
    def action(self) -> str:
        if not self.source_messages:
            return "nothing to move"
        if self.target_broker is None:
            return "blocked: missing on target (run `enmesh apply` on the target first)"
        return f"move {self.source_messages}"


@dataclass
class MigrationPlan:
    source: str
    target: str
    tenants: dict[str, list[str]] = field(default_factory=dict)  # source/target/both -> names
    addresses: list[dict[str, str]] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    users_missing_on_target: list[str] = field(default_factory=list)
    queues: list[QueueState] = field(default_factory=list)

    @property
    def to_move(self) -> int:
        return sum(q.source_messages for q in self.queues if q.target_broker is not None)

    @property
    def blocked(self) -> list[QueueState]:
        return [q for q in self.queues if q.source_messages and q.target_broker is None]

    def as_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "target": self.target,
            "tenants": self.tenants,
            "addresses": self.addresses,
            "conflicts": self.conflicts,
            "usersMissingOnTarget": self.users_missing_on_target,
            "queues": [{**asdict(q), "action": q.action} for q in self.queues],
            "messagesToMove": self.to_move,
            "blocked": [q.queue for q in self.blocked],
        }

    def text(self) -> str:
        lines = [f"migration plan: {self.source} -> {self.target}"]
        for where in ("both", "source", "target"):
            names = self.tenants.get(where, [])
            lines.append(f"  tenants on {where}: {', '.join(names) if names else '-'}")
        only = [a for a in self.addresses if a["on"] != "both"]
        lines.append(f"  addresses: {len(self.addresses)} ({len(only)} on one side only)")
        lines.extend(f"    {a['address']} ({a['type']}) only on {a['on']}" for a in only)
        lines.extend(f"  conflict: {c}" for c in self.conflicts)
        missing = self.users_missing_on_target
        lines.append(f"  users missing on target: {', '.join(missing) if missing else 'none'}")
        lines.append("  stored messages (source -> target):")
        for q in self.queues:
            where = q.target_broker or "-"
            lines.append(
                f"    {q.queue:24} {q.source_broker}:{q.source_messages:<8} "
                f"{where}:{q.target_messages:<8} {q.action}"
            )
        lines.append(f"  would move {self.to_move} message(s)")
        return "\n".join(lines)


def _addresses(end: StackEnd) -> dict[str, str]:
    return {f"{a['space']}/{a['address']}": str(a["type"]) for a in end.deployment["addresses"]}


def _stored_queue_names(end: StackEnd) -> dict[str, tuple[str, str]]:
    """Queue name -> (space/address, type) for the model's stored addresses."""
    names = {}
    for a in end.deployment["addresses"]:
        if a["type"] in STORED_TYPES:
            names[f"{a['space']}.{a['address']}"] = (f"{a['space']}/{a['address']}", a["type"])
    return names


def _vhosts(end: StackEnd) -> dict[str, set[str]]:
    """Broker name -> the vhosts it has (read from the node)."""
    result: dict[str, set[str]] = {}
    for broker in end.brokers:
        try:
            out = broker.ctl.run("list_vhosts", "--no-table-headers", "name")
        except BrokerError as exc:
            # rabbitmqctl's diagnostics run to a page; the first lines say what failed.
            first = " ".join(str(exc).split("\n")[:1])
            raise MigrateError(
                f"stack {end.name!r}: broker {broker.name} cannot be reached with "
                f"{' '.join(broker.ctl.argv)}: {first}"
            ) from None
        result[broker.name] = {line.strip() for line in out.splitlines() if line.strip()}
    return result


def depths(end: StackEnd) -> dict[tuple[str, str], tuple[str, int]]:
    """(vhost, queue) -> (broker name, messages) over all of a stack's brokers."""
    found: dict[tuple[str, str], tuple[str, int]] = {}
    for broker, vhosts in _vhosts(end).items():
        ctl = end.broker(broker).ctl
        try:
            for key, messages in queue_depths(ctl, vhosts).items():
                found[key] = (broker, messages)
        except BrokerError as exc:
            raise BrokerError(f"stack {end.name!r}: {exc}") from None
    return found


def _split(source: Iterable[str], target: Iterable[str]) -> dict[str, list[str]]:
    s, t = set(source), set(target)
    return {"both": sorted(s & t), "source": sorted(s - t), "target": sorted(t - s)}


def make_plan(source: StackEnd, target: StackEnd) -> MigrationPlan:
    plan = MigrationPlan(source.name, target.name)
    plan.tenants = _split(
        (a["space"] for a in source.deployment["addresses"]),
        (a["space"] for a in target.deployment["addresses"]),
    )
    src_addr, dst_addr = _addresses(source), _addresses(target)
    for name in sorted(set(src_addr) | set(dst_addr)):
        on = (
            "both"
            if name in src_addr and name in dst_addr
            else ("source" if name in src_addr else "target")
        )
        kind = src_addr.get(name) or dst_addr[name]
        plan.addresses.append({"address": name, "type": kind, "on": on})
        if on == "both" and src_addr[name] != dst_addr[name]:
            plan.conflicts.append(
                f"address {name} is {src_addr[name]} on {source.name} but {dst_addr[name]} "
                f"on {target.name}"
            )
    plan.users_missing_on_target = sorted(set(source.users()) - set(target.users()))
    stored = _stored_queue_names(source)
    target_depths = depths(target)
    for (vhost, queue), (broker, messages) in sorted(depths(source).items()):
        address, kind = stored.get(queue, ("", "unmodelled"))
        there = target_depths.get((vhost, queue))
        plan.queues.append(
            QueueState(
                vhost=vhost,
                queue=queue,
                address=address,
                type=kind,
                source_broker=broker,
                source_messages=messages,
                target_broker=there[0] if there else None,
                target_messages=there[1] if there else 0,
            )
        )
    return plan


def dumps(plan: MigrationPlan) -> str:
    return json.dumps(plan.as_json(), indent=2, sort_keys=True)
