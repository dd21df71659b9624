"""How `enmesh apply` reaches a stack: where its files are installed, how each router is
signalled and read, how each broker is commanded.

A target is built from the stack's `deploy.json` plus the host's process manager
(supervisord or systemd) and RabbitMQ node; tests build one for their own processes
(`Processes` signaller, a private node's `rabbitmqctl`). Every component must be on this
host: a multi-host site applies through its playbook, which runs the same steps per host.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from enmesh.compile.stack import load_stack
from enmesh.control.brokers import Rabbitmqctl
from enmesh.control.errors import ApplyRefused
from enmesh.control.management import router_url
from enmesh.control.routers import RouterFiles, Signaller, Supervisord, Systemd

DEFAULT_RABBITMQCTL = ("/usr/sbin/rabbitmqctl", "--node", "rabbit@localhost")


@dataclass(frozen=True)
class Target:
    config_dir: Path  # the installed files (deploy.json paths.config)
    secrets_dir: Path
    sasldb: Path
    routers: tuple[RouterFiles, ...]
    brokers: tuple[Rabbitmqctl, ...]
    signaller: Signaller


def router_files(deployment: dict[str, Any], config_dir: Path) -> tuple[RouterFiles, ...]:
    return tuple(
        RouterFiles(
            id=r["id"],
            config=config_dir / r["config"],
            policies=config_dir / "auth" / "policies",
            metrics_url=f"http://{r['host']}:{r['ports']['metrics']}/metrics",
            amqp_url=router_url(r),
        )
        for r in deployment["routers"]
    )


def from_deployment(
    deployment: dict[str, Any],
    *,
    signaller: Signaller,
    brokers: dict[str, Rabbitmqctl],
) -> Target:
    paths = deployment["paths"]
    config_dir = Path(paths["config"])
    return Target(
        config_dir=config_dir,
        secrets_dir=Path(paths["secrets"]),
        sasldb=Path(deployment["sasldb"]),
        routers=router_files(deployment, config_dir),
        # A broker without a handle here is left alone (a test mesh may run none).
        brokers=tuple(brokers[b["name"]] for b in deployment["brokers"] if b["name"] in brokers),
        signaller=signaller,
    )


def installed_deployment(stack_file: Path) -> dict[str, Any]:
    """The `deploy.json` that `enmesh up` installed for the stack on this host;
    ApplyRefused, saying what to run, if the stack is not deployed here."""
    stack, _ = load_stack(stack_file)
    deploy_json = Path(stack.spec.paths.config) / "deploy.json"
    found = read_deployment(deploy_json)
    if found is None:
        raise ApplyRefused(
            f"stack {stack.name!r} is not deployed on this host ({deploy_json} is missing): "
            f"run `enmesh up --stack {stack.name}` first"
        )
    return found


def read_deployment(deploy_json: Path) -> dict[str, Any] | None:
    """A deploy description; None if the file cannot be read (not deployed there)."""
    try:
        found: dict[str, Any] = json.loads(deploy_json.read_text(encoding="utf-8"))
    except OSError:
        return None
    return found


def on_this_host(
    deployment: dict[str, Any],
    *,
    systemd: bool,
    supervisor_config: str,
    rabbitmqctl: tuple[str, ...],
) -> Target:
    """The stack as `enmesh up` deployed it on this host (one broker per host)."""
    if len(deployment["brokers"]) > 1 or len({r["host"] for r in deployment["routers"]}) > 1:
        raise ApplyRefused(
            f"stack {deployment['stack']!r} spans several hosts: apply it with its playbook "
            "(ansible-playbook ... playbooks/site.yml), which applies live on each host"
        )
    signaller: Signaller = Systemd() if systemd else Supervisord(supervisor_config)
    brokers = {b["name"]: Rabbitmqctl(b["name"], rabbitmqctl) for b in deployment["brokers"]}
    return from_deployment(deployment, signaller=signaller, brokers=brokers)
