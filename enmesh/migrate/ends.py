"""How migrate reaches a stack: its deploy description (`deploy.json`, as `enmesh render`
writes it and `enmesh up` installs it), its secrets directory, and one `rabbitmqctl`
handle per broker. Nothing else is needed from a stack."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from enmesh.compile import find_stack_file
from enmesh.control.brokers import Rabbitmqctl
from enmesh.control.target import installed_deployment

DEFAULT_RABBITMQCTL = "/usr/sbin/rabbitmqctl"


class MigrateError(RuntimeError):
    """A migration step stops before changing anything it cannot finish safely."""


@dataclass(frozen=True)
class Broker:
    name: str
    host: str
    amqps_port: int
    ctl: Rabbitmqctl


@dataclass(frozen=True)
class StackEnd:
    """One side of a migration (source or target)."""

    name: str
    deployment: dict[str, Any]
    brokers: tuple[Broker, ...]
    ca: Path  # the stack's CA certificate, on this host
    config_dir: Path  # the stack's rendered files (auth/users.json), on this host

    def broker(self, name: str) -> Broker:
        return next(b for b in self.brokers if b.name == name)

    def users(self) -> list[str]:
        """The messaging users' SASL identities (`user@space`), from the installed users."""
        path = self.config_dir / "auth" / "users.json"
        try:
            users = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise MigrateError(f"stack {self.name!r}: cannot read {path}: {exc.strerror}") from None
        return sorted(str(u["identity"]) for u in users.get("messagingUsers", []))


def end_from_deployment(
    name: str,
    deployment: dict[str, Any],
    ctls: dict[str, Rabbitmqctl],
    *,
    ca: Path | None = None,
    config_dir: Path | None = None,
) -> StackEnd:
    """A stack end from its deploy description and a `rabbitmqctl` handle per broker.
    The CA and the rendered files are where the deploy description installs them on the
    stack's hosts, unless this host keeps them elsewhere (a site's deployer)."""
    brokers = []
    for item in deployment.get("brokers", []):
        if item["name"] not in ctls:
            raise MigrateError(f"stack {name!r}: no rabbitmqctl handle for broker {item['name']}")
        brokers.append(
            Broker(item["name"], item["host"], int(item["ports"]["amqps"]), ctls[item["name"]])
        )
    return StackEnd(
        name,
        deployment,
        tuple(brokers),
        ca=ca or Path(deployment["ca"]),
        config_dir=config_dir or Path(deployment["paths"]["config"]),
    )


def end_from_stack(stack: str, stacks_dir: Path, rabbitmq_node: str) -> StackEnd:
    """The stack as `enmesh up` deployed it on this host: its installed deploy.json, and
    Debian's rabbitmqctl talking to `rabbitmq_node`."""
    deployment = installed_deployment(find_stack_file(stack, stacks_dir))
    if len(deployment.get("brokers", [])) > 1:
        raise MigrateError(
            f"stack {deployment['stack']!r} has several brokers; "
            "this host's rabbitmqctl reaches one"
        )
    ctls = {
        b["name"]: Rabbitmqctl(b["name"], (DEFAULT_RABBITMQCTL, "--node", rabbitmq_node))
        for b in deployment.get("brokers", [])
    }
    return end_from_deployment(str(deployment["stack"]), deployment, ctls)
