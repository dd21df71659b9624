"""The `enmesh migrate` subcommands: `plan`, `prepare`, `bridge`, `move-stored` and `finish`."""

from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path
from typing import Any

from enmesh.compile import find_stack_file, load_stack
from enmesh.control.commands import deployed_target, manager_options, router_signaller
from enmesh.control.errors import ApplyRefused
from enmesh.deploy import stackctl
from enmesh.migrate.bridge import Side, bridge, unbridge, unbridge_side
from enmesh.migrate.bridge_site import bridge_to_site
from enmesh.migrate.ends import StackEnd, end_from_stack
from enmesh.migrate.finish import finish_and_remove, remaining
from enmesh.migrate.plan import dumps, make_plan
from enmesh.migrate.prepare import prepare, prepare_site
from enmesh.migrate.shovel import move_stored, report
from enmesh.migrate.site import Site, load_site, site_end


def _site(args: argparse.Namespace) -> Site | None:
    """The target as a site of hosts (`--to-inventory`), None for a stack on this host."""
    if args.to_inventory is None:
        return None
    return load_site(args.to_inventory.resolve(), args.stacks_dir.resolve().parent / "playbooks")


def _ends(args: argparse.Namespace) -> tuple[StackEnd, StackEnd]:
    source = end_from_stack(args.source, args.stacks_dir, args.from_rabbitmq_node)
    site = _site(args)
    if site is not None:
        return source, site_end(site)
    return source, end_from_stack(args.target, args.stacks_dir, args.to_rabbitmq_node)


def _cmd_plan(args: argparse.Namespace) -> int:
    plan = make_plan(*_ends(args))
    print(dumps(plan) if args.json else plan.text())
    return 0


def _side(args: argparse.Namespace, stack: str, rabbitmq_node: str) -> Side:
    stack_file = find_stack_file(stack, args.stacks_dir)
    target = deployed_target(
        stack_file,
        manager=args.manager,
        supervisor_config=args.supervisor_config,
        rabbitmq_node=rabbitmq_node,
    )
    return Side(stack_file, target)


def _cmd_prepare(args: argparse.Namespace) -> int:
    source = find_stack_file(args.source, args.stacks_dir)
    site = _site(args)
    if site is not None:
        print(prepare_site(source, site).text())
        return 0
    target = _side(args, args.target, args.to_rabbitmq_node)
    print(prepare(source, target.stack_file, target.target).text())
    return 0


def _cmd_bridge(args: argparse.Namespace) -> int:
    site = _site(args)
    if site is not None:  # the source's bridge file is the whole bridge
        source_side = _side(args, args.source, args.from_rabbitmq_node)
        if args.remove:
            name = load_stack(site.stack_file)[0].name
            removed = unbridge_side(source_side, name)
            print(
                f"{source_side.stack.name}'s routers left {name}'s mesh"
                if removed
                else "no bridge between them"
            )
            return 0
        print(bridge_to_site(source_side, site, timeout=args.timeout).text())
        return 0
    target = _side(args, args.target, args.to_rabbitmq_node)
    if args.remove:
        try:
            source: Side | None = _side(args, args.source, args.from_rabbitmq_node)
        except (ApplyRefused, FileNotFoundError):  # the source is gone: the target's part
            source = None
        name = (
            source.stack.name
            if source is not None
            else Path(args.source).name.removesuffix(".stack.yml")
        )
        print("\n".join(unbridge(source, target, name)) or "no bridge between them")
        return 0
    source = _side(args, args.source, args.from_rabbitmq_node)
    print(bridge(source, target, ca_key=args.from_ca_key, timeout=args.timeout).text())
    return 0


def _cmd_move_stored(args: argparse.Namespace) -> int:
    source, target = _ends(args)
    if args.dry_run:
        print(make_plan(source, target).text())
        return 0
    print(report(move_stored(source, target, timeout=args.timeout)))
    return 0


def _cmd_finish(args: argparse.Namespace) -> int:
    source, _ = _ends(args)
    secrets = Path(source.deployment["paths"]["secrets"])
    if not args.purge:
        left = remaining(source, secrets)
        print(left.text(source.name))
        if left.empty:
            print("Remove it with `enmesh migrate finish ... --purge`.")
        return 0 if left.empty else 1
    project = stackctl.Project(args.stacks_dir.resolve().parent, source.name)
    left = finish_and_remove(
        source,
        secrets,
        router_signaller(args.manager, args.supervisor_config),
        partial(stackctl.down, project, purge=True),
    )
    print(left.text(source.name))
    if args.to_inventory is not None:  # a site holds no part of the bridge
        return 0 if left.empty else 1
    if left.empty and unbridge_side(_side(args, args.target, args.to_rabbitmq_node), source.name):
        print(f"{args.target}'s routers no longer connect to {source.name}'s")
    return 0 if left.empty else 1


def add_migrate(commands: Any, stacks_dir: Path) -> None:
    migrate = commands.add_parser(
        "migrate",
        help="move a running service to another stack (plan, prepare, bridge, move-stored, finish)",
        description="Move a running service from stack FROM to stack TO, one step at a time. "
        "Each step can be run again after an interruption. See docs/migrate.md.",
    )
    steps = migrate.add_subparsers(dest="step", required=True, metavar="STEP")
    plan = steps.add_parser(
        "plan",
        help="what exists on each stack and what would move (changes nothing)",
        description="Read both stacks' models and brokers: tenants, addresses, users and "
        "stored messages per queue, subscription and dead-letter queue; print what would move.",
    )
    plan.add_argument("--json", action="store_true", help="machine-readable output")
    plan.add_argument(
        "--dry-run", action="store_true", help="accepted; plan never changes anything"
    )
    plan.set_defaults(run=_cmd_plan)
    ready = steps.add_parser(
        "prepare",
        help="give the target the source's model and users' passwords (enmesh apply)",
        description="Write the source's model documents the target lacks into the target's "
        "runtime part, make each messaging user's password on the target the source's, and "
        "apply the target live. Refuses, changing nothing, if both define a document "
        "differently. Run it again at will: a second run changes nothing.",
    )
    manager_options(ready)
    ready.set_defaults(run=_cmd_prepare)
    join = steps.add_parser(
        "bridge",
        help="join the two meshes; the source's routers use the target's brokers",
        description="Connect every router of the target to every router of the source "
        "(inter-router, mutual TLS: a certificate from the source's CA when the stacks have "
        "different CAs), wait until both meshes route as one, then make the source's routers "
        "use the target's brokers through the mesh, so nothing new is stored on the source. "
        "Needs the target to serve every address of the source (`prepare` first). "
        "--remove undoes it.",
    )
    join.add_argument(
        "--from-ca-key",
        type=Path,
        metavar="FILE",
        help="the source CA's private key (default: <source paths.state>/pki/ca.key)",
    )
    join.add_argument(
        "--timeout", type=float, default=60.0, help="seconds for the meshes to join (default 60)"
    )
    join.add_argument("--remove", action="store_true", help="undo the bridge on both stacks")
    manager_options(join)
    join.set_defaults(run=_cmd_bridge)
    move = steps.add_parser(
        "move-stored",
        help="move every stored message to the same queue on the target (RabbitMQ Shovel)",
        description="Drain every source queue into the target's queue of the same name with "
        "dynamic shovels (acknowledged after the target confirmed). Refuses before moving "
        "anything if the target lacks a queue that holds messages: `enmesh apply` there first.",
    )
    move.add_argument("--dry-run", action="store_true", help="print the plan, move nothing")
    move.add_argument(
        "--timeout", type=float, default=3600.0, help="seconds to wait (default 3600)"
    )
    move.set_defaults(run=_cmd_move_stored)
    finish = steps.add_parser(
        "finish",
        help="whether the source holds no messages and no clients; --purge removes it then",
        description="Check that every queue of the source's brokers is empty and no client "
        "is connected to its routers; say what remains if not (exit 1). With --purge and "
        "nothing left, remove the source (`enmesh down --purge`), never before.",
    )
    finish.add_argument(
        "--purge", action="store_true", help="remove the source stack once it is empty"
    )
    manager_options(finish)
    finish.set_defaults(run=_cmd_finish)
    for step in (plan, ready, join, move, finish):
        step.add_argument("--from", dest="source", required=True, metavar="STACK")
        target = step.add_mutually_exclusive_group(required=True)
        target.add_argument("--to", dest="target", metavar="STACK")
        target.add_argument(
            "--to-inventory",
            type=Path,
            metavar="FILE",
            help="instead of --to: the target is a site of hosts deployed with this Ansible "
            "inventory (docs/migrate.md, To a site of hosts)",
        )
        step.add_argument("--stacks-dir", type=Path, default=stacks_dir, metavar="DIR")
        step.add_argument("--from-rabbitmq-node", default="rabbit@localhost", metavar="NODE")
        step.add_argument("--to-rabbitmq-node", default="rabbit@localhost", metavar="NODE")
