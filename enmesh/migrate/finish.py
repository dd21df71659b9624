"""`enmesh migrate finish`: whether the source stack may be removed yet, and removing it.

The source may go once it holds no messages (every queue of its brokers empty: queues,
subscriptions, dead-letter queues, whatever a client declared) and no client is connected
to any of its routers (connections of role `normal`, other than the stack administrator's
management sessions and the console's own reads). Until then it says what remains: per
queue the messages, per router each client (user, container), so the operator knows whom
to move. A router or broker that cannot be asked counts as not empty: finish removes
nothing it could not check.

Removing (`finish_and_remove`) closes the gap between the check and the removal: once the
check passes, the source's routers are stopped (no client can connect or send from then
on), the brokers are counted again, and only then is the stack removed; if a message came
in between, the routers are started again and nothing is removed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from enmesh.console.mesh import is_client
from enmesh.control.management import Administrator, ManagementError, router_url, session
from enmesh.control.routers import Signaller
from enmesh.migrate.ends import MigrateError, StackEnd
from enmesh.migrate.plan import depths


@dataclass
class Remaining:
    messages: dict[str, int] = field(default_factory=dict)  # "broker vhost/queue" -> count
    clients: list[str] = field(default_factory=list)  # "router: user (container)"
    unchecked: list[str] = field(default_factory=list)  # routers that could not be asked

    @property
    def empty(self) -> bool:
        return not (self.messages or self.clients or self.unchecked)

    def text(self, stack: str) -> str:
        if self.empty:
            return f"stack {stack!r} holds no messages and no clients: it can be removed"
        lines = [f"stack {stack!r} cannot be removed yet:"]
        lines += [f"  {queue}: {count} message(s) stored" for queue, count in self.messages.items()]
        lines += [f"  client connected to {client}" for client in self.clients]
        lines += [f"  not checked: {reason}" for reason in self.unchecked]
        lines.append(
            "Move the clients' URLs to the target and the stored messages with "
            "`enmesh migrate move-stored`, then run finish again."
        )
        return "\n".join(lines)


def stored(source: StackEnd) -> dict[str, int]:
    """`broker vhost/queue` -> messages, for every queue of the source holding any."""
    return {
        f"{broker} {vhost}/{queue}": count
        for (vhost, queue), (broker, count) in sorted(depths(source).items())
        if count
    }


def remaining(source: StackEnd, secrets_dir: Path) -> Remaining:
    found = Remaining(messages=stored(source))
    admin = Administrator.of(source.deployment, secrets_dir)
    if isinstance(admin, str):
        raise MigrateError(f"stack {source.name!r}: cannot ask its routers for clients: {admin}")
    for router in source.deployment["routers"]:
        try:
            with session(router_url(router), admin) as node:
                connections = node.query("connection", ["role", "user", "container"])
        except ManagementError as exc:
            found.unchecked.append(str(exc))
            continue
        found.clients += [
            f"{router['id']}: {c['user']} ({c['container']})"
            for c in connections
            if is_client(c) and c["user"] != admin.identity
        ]
    return found


def finish_and_remove(
    source: StackEnd, secrets_dir: Path, signaller: Signaller, remove: Callable[[], object]
) -> Remaining:
    """Remove the source if it holds nothing; what remains otherwise (nothing removed)."""
    left = remaining(source, secrets_dir)
    if not left.empty:
        return left
    routers = [str(r["id"]) for r in source.deployment["routers"]]
    for router in routers:
        signaller.stop(router)
    left = Remaining(messages=stored(source))
    if not left.empty:  # a client sent between the check and the stop
        for router in routers:
            signaller.restart(router)
        return left
    remove()
    return left
