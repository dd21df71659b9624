"""The `enmesh` command: validate models, render stacks.

Exit codes: 0 success, 1 bad input (the message says what and where), 2 usage error.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from enmesh import __version__, clients
from enmesh.compile import CompileError, compile_stack_file, find_stack_file, write_artefacts
from enmesh.control import commands as control
from enmesh.control.apply import ApplyRefused
from enmesh.control.brokers import BrokerError
from enmesh.control.export import ExportError, add_export
from enmesh.control.routers import RouterError
from enmesh.deploy import keycloak_users, stackctl
from enmesh.deploy.bundle import write_bundle
from enmesh.deploy.debs import RepositoryError, write_archive
from enmesh.deploy.sasldb import SasldbError, ensure_from_deployment, watch_sasldb
from enmesh.deploy.secrets import ensure_secrets
from enmesh.deploy.smoke_run import run_smoke
from enmesh.deploy.wheels import WheelhouseError, write_wheels_archive
from enmesh.k8s.config import KubeStackError
from enmesh.migrate.commands import add_migrate
from enmesh.migrate.ends import MigrateError
from enmesh.model import ModelInvalidError, load_model
from enmesh_spark import options

DEFAULT_STACKS_DIR = Path("stacks")


def _cmd_validate(args: argparse.Namespace) -> int:
    model = load_model(args.files)
    addresses = sum(len(t.addresses) for t in model.tenants)
    users = sum(len(t.users) for t in model.tenants)
    for warning in model.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(
        f"ok: {len(model.tenants)} address spaces, {addresses} addresses, {users} users "
        f"in {len(args.files)} file(s)"
    )
    return 0


def _cmd_render(args: argparse.Namespace) -> int:
    if args.k8s_out is not None:
        return _render_kubernetes(args)
    if args.out is None:
        raise CompileError("render needs --out DIR (host files) or --k8s-out DIR (Kubernetes)")
    stack_file = find_stack_file(args.stack, args.stacks_dir)
    stack, artefacts = compile_stack_file(stack_file)
    existed = {path for path in artefacts.files if (args.out / path).exists()}
    changed = write_artefacts(artefacts, args.out)
    print(f"rendered stack {stack.name!r} from {stack_file} into {args.out}:")
    for path in artefacts.files:
        mark = "unchanged" if path not in changed else "changed" if path in existed else "new"
        print(f"  {mark:9}  {path}")
    removed = sorted(set(changed) - set(artefacts.files))
    for path in removed:
        print(f"  {'removed':9}  {path}")
    new = sum(1 for path in changed if path in artefacts.files and path not in existed)
    print(f"{len(changed)} file(s) changed" + (f" ({new} new)" if new else ""))
    return 0


def _render_kubernetes(args: argparse.Namespace) -> int:
    from enmesh.k8s.render import render_kubernetes  # noqa: PLC0415  (loads Pulumi)

    project_dir = args.stacks_dir.resolve().parent
    result = render_kubernetes(project_dir, args.stack, args.k8s_out)
    print(f"Kubernetes objects of stack {args.stack!r} (Pulumi mocks) in {args.k8s_out}:")
    for path in result.files:
        print(f"  {'changed' if path in result.changed else 'unchanged':9}  {path}")
    for path in result.removed:
        print(f"  {'removed':9}  {path}")
    print(f"{len(result.files)} objects valid against the Kubernetes schemas; stack outputs:")
    for key, value in sorted(result.outputs.items()):
        print(f"  {key}: {str(value).splitlines()[0] if str(value) else value}")
    return 0


def _project(args: argparse.Namespace) -> stackctl.Project:
    return stackctl.Project(args.project_dir.resolve(), args.stack)


def _cmd_up(args: argparse.Namespace) -> int:
    return stackctl.up(_project(args), smoke=not args.no_smoke)


def _cmd_down(args: argparse.Namespace) -> int:
    return stackctl.down(_project(args), purge=args.purge)


def _cmd_status(args: argparse.Namespace) -> int:
    return stackctl.status(_project(args))


def _cmd_smoke(args: argparse.Namespace) -> int:
    ok = run_smoke(_project(args).smoke_stack())
    return 0 if ok else 1


def _cmd_deploy_secrets(args: argparse.Namespace) -> int:
    created = ensure_secrets(args.deploy_json, args.dir)
    print(f"created: {', '.join(created)}" if created else "unchanged")
    return 0


def _changed(changed: bool) -> int:
    """What an idempotent deploy step prints for the role to read (changed_when)."""
    print("changed" if changed else "unchanged")
    return 0


def _cmd_deploy_bundle(args: argparse.Namespace) -> int:
    return _changed(write_bundle(args.source or Path(__file__).resolve().parent.parent, args.out))


def _cmd_deploy_debs(args: argparse.Namespace) -> int:
    return _changed(write_archive(args.repository, args.out))


def _cmd_deploy_wheels(args: argparse.Namespace) -> int:
    return _changed(write_wheels_archive(args.wheelhouse, args.out))


def _cmd_deploy_sasldb(args: argparse.Namespace) -> int:
    path, changed = ensure_from_deployment(args.config_dir, args.flat_secrets)
    print(f"{'changed' if changed else 'unchanged'}: {path}", flush=True)
    if args.watch > 0:
        watch_sasldb(args.config_dir, args.flat_secrets, args.watch)
    return 0


def _stack_commands(commands: Any) -> None:
    for name, run, summary in (
        (
            "up",
            _cmd_up,
            "bring a stack up with playbooks/site.yml, smoke-check it, print endpoints",
        ),
        ("down", _cmd_down, "stop a stack with playbooks/teardown.yml (broker data kept)"),
        ("status", _cmd_status, "probe every router and broker of a stack"),
        ("smoke", _cmd_smoke, "send one message through every address type of a running stack"),
    ):
        command = commands.add_parser(
            name, help=summary, description=summary[0].upper() + summary[1:] + "."
        )
        command.add_argument(
            "--stack", default="local", metavar="NAME", help="stack (default: local)"
        )
        command.add_argument(
            "--project-dir",
            type=Path,
            default=Path(),
            metavar="DIR",
            help="the enmesh checkout holding stacks/ and playbooks/ (default: .)",
        )
        command.set_defaults(run=run)
        if name == "up":
            command.add_argument("--no-smoke", action="store_true", help="skip the smoke check")
        if name == "down":
            command.add_argument(
                "--purge", action="store_true", help="also delete broker data (stored messages)"
            )


def _deploy_commands(commands: Any) -> None:
    deploy = commands.add_parser(
        "deploy",
        help="steps the Ansible roles run (secrets, source bundle, SASL database)",
        description="Idempotent deployment steps; each prints 'changed' or 'unchanged'.",
    )
    steps = deploy.add_subparsers(dest="step", required=True, metavar="STEP")
    secrets = steps.add_parser("secrets", help="generate the stack's missing secrets (0600)")
    secrets.add_argument("--deploy-json", type=Path, required=True, metavar="FILE")
    secrets.add_argument("--dir", type=Path, required=True, metavar="DIR")
    secrets.set_defaults(run=_cmd_deploy_secrets)
    bundle = steps.add_parser("bundle", help="write a reproducible source archive to install")
    bundle.add_argument("--out", type=Path, required=True, metavar="FILE")
    bundle.add_argument(
        "--source",
        type=Path,
        metavar="DIR",
        help="the enmesh source tree to pack (default: the one this command runs from)",
    )
    bundle.set_defaults(run=_cmd_deploy_bundle)
    debs = steps.add_parser(
        "debs", help="pack a flat apt repository for air-gapped hosts into one archive"
    )
    debs.add_argument("--repository", type=Path, required=True, metavar="DIR")
    debs.add_argument("--out", type=Path, required=True, metavar="FILE")
    debs.set_defaults(run=_cmd_deploy_debs)
    wheels = steps.add_parser(
        "wheels", help="pack a wheelhouse for air-gapped hosts into one archive"
    )
    wheels.add_argument("--wheelhouse", type=Path, required=True, metavar="DIR")
    wheels.add_argument("--out", type=Path, required=True, metavar="FILE")
    wheels.set_defaults(run=_cmd_deploy_wheels)
    sasldb = steps.add_parser("sasldb", help="build the routers' SASL database from the secrets")
    sasldb.add_argument("--config-dir", type=Path, default=Path("/etc/enmesh"), metavar="DIR")
    sasldb.add_argument(
        "--flat-secrets",
        type=Path,
        metavar="DIR",
        help="read passwords from DIR/<secret>_<key> (a Kubernetes Secret mounted whole)",
    )
    sasldb.add_argument(
        "--watch",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="keep running: rebuild when users or passwords change, checked every SECONDS",
    )
    sasldb.set_defaults(run=_cmd_deploy_sasldb)
    control.add_reload_step(steps)
    control.add_broker_step(steps)
    keycloak_users.add_step(steps)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="enmesh",
        description="Messaging as a service from infrastructure as code: validate an address "
        "model and render the router, broker and auth configuration a stack runs.",
    )
    parser.add_argument("--version", action="version", version=f"enmesh {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    validate = commands.add_parser(
        "validate",
        help="check model files and report every problem with file, document and field",
        description="Validate address model files (multi-document YAML) as one model. "
        "Prints every problem, each with file:line, document and field path.",
    )
    validate.add_argument("files", nargs="+", type=Path, metavar="FILE", help="model file")
    validate.set_defaults(run=_cmd_validate)

    render = commands.add_parser(
        "render",
        help="compile a stack's model into router, broker and auth files",
        description="Compile the model of stack NAME (stacks/NAME.stack.yml) and write every "
        "artefact under DIR: routers/*.conf (qdrouterd.conf format), brokers/*.definitions.json "
        "(RabbitMQ), auth/ (users, SASL config, vhost policies) and manifest.json. Output is "
        "deterministic; files that did not change are not rewritten.",
    )
    render.add_argument("--stack", required=True, metavar="NAME", help="stack name or file")
    render.add_argument("--out", type=Path, metavar="DIR", help="output directory (host files)")
    render.add_argument(
        "--k8s-out",
        type=Path,
        metavar="DIR",
        help="instead, run the Kubernetes stack stacks/Pulumi.NAME.yaml under Pulumi's mocks, "
        "validate every object against the Kubernetes schemas and write them as YAML to DIR",
    )
    render.add_argument(
        "--stacks-dir",
        type=Path,
        default=DEFAULT_STACKS_DIR,
        metavar="DIR",
        help="where stack files live (default: %(default)s)",
    )
    render.set_defaults(run=_cmd_render)

    send = commands.add_parser(
        "send",
        help="send messages to an address (an AMQP 1.0 client to try a stack)",
        description="Send COUNT messages to ADDRESS and report their outcomes. Exits 1 unless "
        "every message was accepted.",
    )
    _connection_options(send)
    send.add_argument("--count", type=int, default=1, help="messages to send (default 1)")
    send.add_argument("--body", default="message {n}", help="body; {n} is the message number")
    send.add_argument("--subject", help="message subject")
    send.add_argument("--ttl", type=float, help="time to live in seconds")
    send.set_defaults(run=_cmd_send)

    receive = commands.add_parser(
        "receive",
        help="receive messages from an address and print their bodies",
        description="Receive from ADDRESS, printing each body on its own line, until COUNT "
        "messages arrived or the timeout passes.",
    )
    _connection_options(receive)
    receive.add_argument("--count", type=int, help="stop after this many messages")
    receive.set_defaults(run=_cmd_receive)
    _stack_commands(commands)
    control.add_apply(commands, DEFAULT_STACKS_DIR)
    add_export(commands, DEFAULT_STACKS_DIR)
    add_migrate(commands, DEFAULT_STACKS_DIR)
    _deploy_commands(commands)
    _pipeline_commands(commands)
    return parser


def _pipeline_commands(commands: Any) -> None:
    simulate = commands.add_parser(
        "simulate",
        help="send seeded device telemetry (JSON readings) to an address",
        description="Simulate DEVICES devices each sending RATE readings per second for "
        "DURATION seconds to ADDRESS, optionally with malformed records and spikes. The same "
        "seed gives the same readings. Exits 1 unless every reading was accepted.",
    )
    _connection_options(simulate)
    options.simulate_arguments(simulate)
    simulate.set_defaults(run=_cmd_simulate)
    report = commands.add_parser(
        "report",
        help="plot the telemetry job's Parquet output to PNG (per device, and a summary)",
        description="Render per-device time series with 1 min windows and anomaly marks, and "
        "a summary, from the telemetry job's output directory.",
    )
    options.report_arguments(report)
    report.set_defaults(run=_cmd_report)


def _cmd_simulate(args: argparse.Namespace) -> int:
    from enmesh_spark import simulator  # noqa: PLC0415

    return simulator.run(args, clients.endpoint_from(args))


def _cmd_report(args: argparse.Namespace) -> int:
    from enmesh_spark import report  # noqa: PLC0415

    return report.run(args)


def _connection_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url", metavar="URL", help="amqp://host:port or amqps://host:port")
    parser.add_argument("address", metavar="ADDRESS", help="address to use, e.g. telemetry")
    parser.add_argument("--user", help="SASL user, <username>@<address space>")
    parser.add_argument(
        "--password-file",
        type=Path,
        metavar="FILE",
        help=f"file holding the password (or set {clients.PASSWORD_ENV})",
    )
    parser.add_argument("--vhost", help="address space (default: the part of --user after @)")
    parser.add_argument("--ca", type=Path, help="CA certificate to verify an amqps:// server")
    parser.add_argument("--mechanisms", help="SASL mechanisms (default SCRAM-SHA-256 PLAIN)")
    parser.add_argument("--timeout", type=float, default=30, help="seconds (default 30)")


def _cmd_send(args: argparse.Namespace) -> int:
    return clients.send(args)


def _cmd_receive(args: argparse.Namespace) -> int:
    return clients.receive(args)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.run(args)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return code
    except ModelInvalidError as exc:
        print(f"error: {exc}", file=sys.stderr)
    except (
        CompileError,
        FileNotFoundError,
        clients.ClientError,
        stackctl.StackError,
        SasldbError,
        RepositoryError,
        WheelhouseError,
        KubeStackError,
        ApplyRefused,
        BrokerError,
        RouterError,
        MigrateError,
        ExportError,
    ) as exc:
        print(f"error: {exc}", file=sys.stderr)
    except BrokenPipeError:  # `enmesh render ... | head`: the reader has what it wanted
        # Python would report the pipe again when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except OSError as exc:
        print(f"error: {exc.strerror}: {exc.filename}", file=sys.stderr)
    except Exception as exc:  # a bug in enmesh: say so briefly, keep the trace opt-in
        if os.environ.get("ENMESH_DEBUG"):
            raise
        print(
            f"internal error: {type(exc).__name__}: {exc} (set ENMESH_DEBUG=1 for the "
            "traceback, and please report it)",
            file=sys.stderr,
        )
    return 1


if __name__ == "__main__":
    sys.exit(main())
