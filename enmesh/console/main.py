"""`enmesh-console`: serve the console of a stack deployed on this host, over HTTPS; with
`--kubernetes`, the console of a Kubernetes stack (enmesh.console.kubernetes)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

import uvicorn

from enmesh.compile import find_stack_file
from enmesh.compile.identity import deployed_with_keycloak
from enmesh.console import kubernetes
from enmesh.console.app import Settings, create_app
from enmesh.console.mesh import Router
from enmesh.console.oidc import OidcSettings
from enmesh.control.commands import SUPERVISOR_CONFIG
from enmesh.control.target import DEFAULT_RABBITMQCTL, Target, on_this_host


def routers_of(deployment: dict[str, Any]) -> tuple[Router, ...]:
    keycloak = deployed_with_keycloak(deployment)
    return tuple(
        Router(
            r["id"],
            f"amqps://{r['host']}:{r['ports']['amqps']}",
            f"amqp://{r['host']}:{r['ports']['amqp']}" if keycloak else None,
        )
        for r in deployment["routers"]
    )


def _prometheus(deployment: dict[str, Any]) -> str | None:
    monitoring = deployment.get("monitoring")
    return f"http://{monitoring['host']}:{monitoring['port']}" if monitoring else None


def oidc_of(deployment: dict[str, Any], console_url: str, ca: Path) -> OidcSettings | None:
    """The console's Keycloak login on a Keycloak stack, when its client's secret is here
    (a stack rendered before the console had one has none: password logins only)."""
    if not deployed_with_keycloak(deployment):
        return None
    identity = deployment["identity"]
    path = identity.get("consoleSecret")
    try:
        secret = Path(path).read_text(encoding="utf-8").strip() if path else ""
    except OSError as exc:
        logging.getLogger("enmesh.console").warning(
            "no login through Keycloak: cannot read %s: %s", path, exc.strerror
        )
        return None
    if not secret:
        return None
    keycloak = identity["keycloak"]
    return OidcSettings(keycloak["url"], keycloak["realm"], secret, console_url, ca)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="enmesh-console",
        description="The web console of a stack on this host (HTTPS). Logins are checked "
        "against the mesh's SASL; changes go through `enmesh apply`.",
    )
    parser.add_argument("--stack", default="local", metavar="NAME")
    parser.add_argument("--stacks-dir", type=Path, default=Path("stacks"), metavar="DIR")
    parser.add_argument("--config-dir", type=Path, default=Path("/etc/enmesh"), metavar="DIR")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8443)
    parser.add_argument("--cert", type=Path, required=True, help="TLS certificate (PEM)")
    parser.add_argument("--key", type=Path, required=True, help="its private key (PEM)")
    parser.add_argument(
        "--administrator",
        metavar="IDENTITY",
        help="SASL identity of the stack administrator (logs in on the default vhost)",
    )
    parser.add_argument(
        "--prometheus",
        metavar="URL",
        help="the stack's Prometheus for the charts (default: the one deploy.json names, if any)",
    )
    parser.add_argument(
        "--kubernetes",
        action="store_true",
        help="the stack runs on Kubernetes: changes are refused (they are `pulumi up`'s), "
        "messages stored come from --prometheus (deploy.json names none there)",
    )
    parser.add_argument(
        "--public-url",
        metavar="URL",
        help="where browsers reach the console, if not https://HOST:PORT (Keycloak's "
        "login sends them back there)",
    )
    parser.add_argument("--rabbitmq-node", default="rabbit@localhost", metavar="NODE")
    parser.add_argument("--supervisor-config", default=SUPERVISOR_CONFIG, metavar="FILE")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        stack_file = find_stack_file(args.stack, args.stacks_dir)
        deployment = json.loads((args.config_dir / "deploy.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        print(f"error: {exc} (is the stack deployed on this host? `enmesh up`)", file=sys.stderr)
        return 1

    def on_host() -> Target:
        return on_this_host(
            deployment,
            systemd=Path("/run/systemd/system").is_dir(),
            supervisor_config=args.supervisor_config,
            rabbitmqctl=(*DEFAULT_RABBITMQCTL[:2], args.rabbitmq_node),
        )

    if args.kubernetes:
        prometheus = args.prometheus
        target = kubernetes.refusing_target(deployment["stack"])
        stored = kubernetes.stored_messages(prometheus)
    else:
        prometheus, target, stored = args.prometheus or _prometheus(deployment), on_host, None
    public_url = args.public_url or f"https://{args.host}:{args.port}"
    settings = Settings(
        stack_file=stack_file,
        routers=routers_of(deployment),
        ca=Path(deployment["ca"]),
        target=target,
        administrator=args.administrator,
        prometheus=prometheus,
        stored=stored,
        oidc=oidc_of(deployment, public_url, Path(deployment["ca"])),
    )
    uvicorn.run(
        create_app(settings),
        host=args.host,
        port=args.port,
        ssl_certfile=str(args.cert),
        ssl_keyfile=str(args.key),
        access_log=False,  # paths only, but keep the log to what the console says
        log_level="info",
        timeout_graceful_shutdown=5,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
