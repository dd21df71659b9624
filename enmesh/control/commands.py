"""The control plane's commands: `enmesh apply`, and `enmesh deploy reload` (the step the
router role runs on each host: the same convergence `apply` does for one router)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from enmesh.compile import find_stack_file
from enmesh.control.apply import StackPlan, apply_stack
from enmesh.control.brokers import (
    Rabbitmqctl,
    add_and_update,
    export_definitions,
    queue_depths,
    remove,
)
from enmesh.control.errors import ApplyRefused
from enmesh.control.output import change_lines
from enmesh.control.plan import Action, broker_plan
from enmesh.control.routers import RouterFiles, Signaller, Supervisord, Systemd, converge
from enmesh.control.target import DEFAULT_RABBITMQCTL, Target, installed_deployment, on_this_host

SUPERVISOR_CONFIG = "/etc/supervisor/supervisord.conf"


def _systemd() -> bool:
    return Path("/run/systemd/system").is_dir()


def _uses_systemd(manager: str) -> bool:
    """`--manager`: systemd if named, or if `auto` and systemd runs this host."""
    return manager == "systemd" or (manager == "auto" and _systemd())


def router_signaller(manager: str, supervisor_config: str) -> Signaller:
    return Systemd() if _uses_systemd(manager) else Supervisord(supervisor_config)


def deployed_target(
    stack_file: Path, *, manager: str, supervisor_config: str, rabbitmq_node: str
) -> Target:
    """The stack as `enmesh up` deployed it on this host, to apply to; ApplyRefused if it
    is not deployed here."""
    return on_this_host(
        installed_deployment(stack_file),
        systemd=_uses_systemd(manager),
        supervisor_config=supervisor_config,
        rabbitmqctl=(*DEFAULT_RABBITMQCTL[:2], rabbitmq_node),
    )


def _cmd_apply(args: argparse.Namespace) -> int:
    stack_file = find_stack_file(args.stack, args.stacks_dir)
    target = deployed_target(
        stack_file,
        manager=args.manager,
        supervisor_config=args.supervisor_config,
        rabbitmq_node=args.rabbitmq_node,
    )
    apply_stack(stack_file, target, dry_run=args.dry_run, force=args.force, refresh=args.refresh)
    return 0


def _cmd_reload(args: argparse.Namespace) -> int:
    deployment: dict[str, Any] = json.loads((args.config_dir / "deploy.json").read_text())
    router = next((r for r in deployment["routers"] if r["id"] == args.router), None)
    if router is None:
        known = ", ".join(r["id"] for r in deployment["routers"])
        print(f"error: no router {args.router!r} in this stack (routers: {known})", file=sys.stderr)
        return 1
    files = RouterFiles(
        id=router["id"],
        config=args.config_dir / router["config"],
        policies=args.config_dir / "auth" / "policies",
        metrics_url=f"http://{router['host']}:{router['ports']['metrics']}/metrics",
    )
    outcome = converge(
        files,
        router_signaller(args.manager, args.supervisor_config),
        other_files_changed=args.admission_changed,
    )
    print(f"{'unchanged' if outcome == 'unchanged' else 'changed'}: router {args.router} {outcome}")
    return 0


def _cmd_broker(args: argparse.Namespace) -> int:
    """One phase of a broker's apply: `add` before the routers reload, `remove` after."""
    desired = json.loads(
        (args.config_dir / "brokers" / f"{args.broker}.definitions.json").read_text()
    )
    ctl = Rabbitmqctl(args.broker, (*DEFAULT_RABBITMQCTL[:2], args.node))
    vhosts = [str(v["name"]) for v in desired.get("vhosts", [])]
    plan = broker_plan(
        args.broker, export_definitions(ctl), desired, queue_depths(ctl, vhosts), vhosts
    )
    refusals = StackPlan("", [], [plan], [], {}, {}).refusals(args.force)
    if refusals:
        raise ApplyRefused("nothing changed:\n  " + "\n  ".join(refusals))
    forced = {q for q in plan.depths if q[1] in args.force or "/".join(q) in args.force}
    wanted = [c for c in plan.changes if (c.action is Action.REMOVE) == (args.phase == "remove")]
    if not wanted:
        print(f"unchanged: broker {args.broker} ({args.phase})")
        return 0
    if args.phase == "add":
        add_and_update(ctl, plan, desired, forced)
    else:
        remove(ctl, plan, forced)
    print(f"changed: broker {args.broker} ({args.phase})")
    print("\n".join(change_lines(wanted)))
    return 0


def manager_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--manager",
        choices=("auto", "supervisord", "systemd"),
        default="auto",
        help="how routers run (default: systemd if it is the service manager, else supervisord)",
    )
    parser.add_argument("--supervisor-config", default=SUPERVISOR_CONFIG, metavar="FILE")


def stack_arguments(parser: argparse.ArgumentParser, stacks_dir: Path) -> None:
    """--stack NAME and --stacks-dir DIR, as every command on one stack takes them."""
    parser.add_argument("--stack", default="local", metavar="NAME", help="stack (default: local)")
    parser.add_argument("--stacks-dir", type=Path, default=stacks_dir, metavar="DIR")


def add_apply(commands: Any, stacks_dir: Path) -> None:
    apply = commands.add_parser(
        "apply",
        help="change a running stack to its model, live (no restart); --dry-run shows the plan",
        description="Compile stack NAME's model, compare it with what the stack runs (router "
        "configs and vhost policies, broker queues/exchanges/bindings/policies, users) and "
        "change only the difference, live: brokers through rabbitmqctl, routers by config "
        "reload (SIGHUP), users in the SASL database. Refuses to delete a queue that holds "
        "messages unless --force names it. Every component must run on this host; a site "
        "applies through its playbook.",
    )
    stack_arguments(apply, stacks_dir)
    apply.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    apply.add_argument(
        "--force",
        nargs="+",
        default=[],
        metavar="QUEUE",
        help="delete these queues even though they hold messages (the messages are lost)",
    )
    apply.add_argument(
        "--refresh",
        action="store_true",
        help="read every broker's state, also where its compiled definitions did not change "
        "since the last apply (finds queues deleted or changed by hand)",
    )
    apply.add_argument("--rabbitmq-node", default="rabbit@localhost", metavar="NODE")
    manager_options(apply)
    apply.set_defaults(run=_cmd_apply)


def add_reload_step(steps: Any) -> None:
    reload = steps.add_parser(
        "reload",
        help="make one router run its installed config and policies (reload, no restart)",
    )
    reload.add_argument("--config-dir", type=Path, default=Path("/etc/enmesh"), metavar="DIR")
    reload.add_argument("--router", required=True, metavar="ID")
    reload.add_argument(
        "--admission-changed", action="store_true", help="auth/admission.json changed too"
    )
    manager_options(reload)
    reload.set_defaults(run=_cmd_reload)


def add_broker_step(steps: Any) -> None:
    broker = steps.add_parser(
        "broker",
        help="bring this host's broker to its installed definitions (add, or remove phase)",
    )
    broker.add_argument("--config-dir", type=Path, default=Path("/etc/enmesh"), metavar="DIR")
    broker.add_argument("--broker", required=True, metavar="NAME")
    broker.add_argument("--node", default="rabbit@localhost", metavar="NODE")
    broker.add_argument("--phase", choices=("add", "remove"), required=True)
    broker.add_argument("--force", nargs="*", default=[], metavar="QUEUE")
    broker.set_defaults(run=_cmd_broker)
