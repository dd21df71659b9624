"""The plan: what differs between the desired state and what the stack runs. Pure.

Routers: their config files and vhost policies, entity by entity (`entities`). Brokers:
the compiled definitions against the broker's exported ones (queues, exchanges, bindings,
policies, vhosts, parameters, permissions). Users: identities and passwords against the
SASL database's record of them. Nothing here touches a process or a file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from enmesh.control.entities import SECRET_MARK, Entities, policy_entities, router_entities

# Names RabbitMQ owns or makes for clients, never ours to diff: its own exchanges, server-named
# queues (the routers' topic subscriptions), the MQTT plugin's subscription queues.
_BROKER_OWNED_PREFIXES = ("amq.", "mqtt-subscription-")


class Action(StrEnum):
    ADD = "+"
    CHANGE = "~"
    REMOVE = "-"
    REPLACE = "-/+"


@dataclass(frozen=True)
class Change:
    action: Action
    kind: str  # entity type: address, autoLink, queue, user, ...
    key: str  # what it is called
    details: tuple[str, ...] = ()  # `attribute: old -> new`, never a secret


def diff_entities(old: Entities, new: Entities) -> list[Change]:
    changes = []
    for key in sorted(old.keys() | new.keys()):
        kind, name = key
        before, after = old.get(key), new.get(key)
        if before is None:
            changes.append(Change(Action.ADD, kind, name))
        elif after is None:
            changes.append(Change(Action.REMOVE, kind, name))
        elif before != after:
            details = tuple(
                _detail(attr, before.get(attr, "(unset)"), after.get(attr, "(unset)"))
                for attr in sorted(before.keys() | after.keys())
                if before.get(attr) != after.get(attr)
            )
            changes.append(Change(Action.CHANGE, kind, name, details))
    return changes


def _detail(attribute: str, old: str, new: str) -> str:
    if SECRET_MARK in old or SECRET_MARK in new:
        return f"{attribute}: (secret) changed"
    return f"{attribute}: {old} -> {new}"


# --- routers -----------------------------------------------------------------------------


@dataclass(frozen=True)
class RouterPlan:
    id: str
    changes: tuple[Change, ...]


def router_plan(
    router: str, old_conf: str | None, new_conf: str, policies: list[Change]
) -> RouterPlan:
    """One router's changes: its config, plus the vhost policies every router shares."""
    old = router_entities(old_conf, f"installed {router}.conf") if old_conf is not None else {}
    new = router_entities(new_conf, f"compiled {router}.conf")
    return RouterPlan(router, (*diff_entities(old, new), *policies))


def policy_changes(old: Mapping[str, str], new: Mapping[str, str]) -> list[Change]:
    """Vhost policy files by name (`<space>.json`) -> their changes."""
    before: Entities = {}
    after: Entities = {}
    for files, into in ((old, before), (new, after)):
        for text in files.values():
            into.update(policy_entities(text))
    return diff_entities(before, after)


# --- brokers -----------------------------------------------------------------------------

Definitions = Mapping[str, Any]
QueueName = tuple[str, str]  # (vhost, name)


def _identify(section: str, item: Mapping[str, Any]) -> str | None:
    """The key of one definitions item, or None if the broker owns it."""
    vhost = item.get("vhost", "")
    if section == "vhosts":
        return str(item["name"])
    if section == "permissions":
        return f"{vhost}/{item['user']}"
    if section == "parameters":
        return f"{vhost}/{item['component']}/{item['name']}"
    if section == "bindings":
        if not item["source"] or _owned(item["source"]) or _owned(item["destination"]):
            return None  # the default exchange's implicit bindings, the broker's own
        return (
            f"{vhost}/{item['source']} -> {item['destination_type']} {item['destination']}"
            f" [{item.get('routing_key', '')}]"
        )
    name = str(item["name"])
    if section in ("queues", "exchanges") and (not name or _owned(name)):
        return None
    return f"{vhost}/{name}"


def _owned(name: object) -> bool:
    return str(name).startswith(_BROKER_OWNED_PREFIXES)


_SECTIONS = {
    "vhosts": ("vhost", ()),
    "queues": ("queue", ("durable", "auto_delete", "arguments")),
    "exchanges": ("exchange", ("type", "durable", "auto_delete", "internal", "arguments")),
    "bindings": ("binding", ("arguments",)),
    "policies": ("policy", ("pattern", "apply-to", "priority", "definition")),
    "parameters": ("parameter", ("value",)),
    "permissions": ("permission", ("configure", "write", "read")),
}


def _items(
    definitions: Definitions, section: str, vhosts: set[str]
) -> dict[str, Mapping[str, Any]]:
    found = {}
    for item in definitions.get(section, []):
        if item.get("vhost", item.get("name")) not in vhosts:
            continue  # a vhost enmesh does not manage (e.g. someone's `/`)
        key = _identify(section, item)
        if key is not None:
            found[key] = item
    return found


@dataclass
class BrokerPlan:
    name: str
    changes: list[Change] = field(default_factory=list)
    # What to remove, by definitions section, as the items themselves.
    removals: dict[str, list[Mapping[str, Any]]] = field(default_factory=dict)
    replace_queues: list[Mapping[str, Any]] = field(default_factory=list)  # arguments changed
    depths: dict[QueueName, int] = field(default_factory=dict)

    @property
    def imports(self) -> bool:
        return any(c.action is not Action.REMOVE for c in self.changes)

    def queues_losing_messages(self) -> list[tuple[QueueName, int]]:
        """Queues this plan deletes (removed, or replaced) that hold messages."""
        gone = [*self.removals.get("queues", []), *self.replace_queues]
        named = [(str(q["vhost"]), str(q["name"])) for q in gone]
        return sorted((q, self.depths[q]) for q in named if self.depths.get(q, 0) > 0)


def broker_plan(
    name: str,
    actual: Definitions,
    desired: Definitions,
    depths: Mapping[QueueName, int],
    managed_vhosts: Iterable[str] = (),
) -> BrokerPlan:
    """`managed_vhosts`: vhosts enmesh put there before (a removed tenant's, to delete)."""
    plan = BrokerPlan(name, depths=dict(depths))
    wanted = {str(v["name"]) for v in desired.get("vhosts", [])}
    vhosts = wanted | set(managed_vhosts)
    for section, (kind, compared) in _SECTIONS.items():
        old = _items(actual, section, vhosts)
        new = _items(desired, section, vhosts)
        for key in sorted(old.keys() | new.keys()):
            before, after = old.get(key), new.get(key)
            if after is None and before is not None:
                plan.changes.append(
                    Change(Action.REMOVE, kind, key, _depth(section, before, depths))
                )
                plan.removals.setdefault(section, []).append(before)
            elif before is None:
                plan.changes.append(Change(Action.ADD, kind, key))
            elif after is not None:
                details = tuple(
                    f"{attr}: {before.get(attr)} -> {after.get(attr)}"
                    for attr in compared
                    if _normal(before.get(attr)) != _normal(after.get(attr))
                )
                if not details:
                    continue
                # RabbitMQ refuses to redeclare a queue with other arguments: it is
                # deleted and declared again, which loses what it holds.
                action = Action.REPLACE if section == "queues" else Action.CHANGE
                if action is Action.REPLACE:
                    plan.replace_queues.append(before)
                    details += _depth(section, before, depths)
                plan.changes.append(Change(action, kind, key, details))
    return plan


def _normal(value: Any) -> Any:
    """Exported definitions write some numbers as text and omit empty maps and false flags
    (`internal`), so those compare equal to what the compiler writes."""
    if value is None or value is False or value in ({}, ""):
        return None
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in sorted(value.items())}
    return str(value)


def _depth(
    section: str, item: Mapping[str, Any], depths: Mapping[QueueName, int]
) -> tuple[str, ...]:
    if section != "queues":
        return ()
    messages = depths.get((str(item["vhost"]), str(item["name"])), 0)
    return (f"holds {messages} message(s)",)


# --- users -------------------------------------------------------------------------------


def user_changes(
    desired: Mapping[str, str],
    installed: Iterable[str],
    same_password: Callable[[str, str], bool | None],
) -> list[Change]:
    """Identities added, removed, or whose password changed (`same_password` is None when
    the database keeps no record of it). Passwords are compared, never shown."""
    have = set(installed)
    changes = []
    for identity in sorted(have | desired.keys()):
        if identity not in have:
            changes.append(Change(Action.ADD, "user", identity))
        elif identity not in desired:
            changes.append(Change(Action.REMOVE, "user", identity))
        elif same_password(identity, desired[identity]) is False:
            changes.append(Change(Action.CHANGE, "user", identity, ("password changed",)))
    return changes
