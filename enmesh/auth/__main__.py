"""`python -m enmesh.auth` (console script `enmesh-auth`): run the authentication service."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import ssl
import sys
from pathlib import Path

from enmesh.auth.bearer import TokenOrPasswordCheck
from enmesh.auth.keycloak import KeycloakSettings, PasswordCheck
from enmesh.auth.lookup import LOOKUP_CLIENT, UserLookup
from enmesh.auth.scram import decoy_key
from enmesh.auth.service import AuthService
from enmesh.auth.verdicts import DEFAULT_MAX_AGE_SECONDS, RememberingCheck


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="enmesh-auth",
        description="Authentication service for routers' authServicePlugin, backed by Keycloak.",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument("--port", type=int, default=5671, help="port to listen on (0: any free)")
    p.add_argument("--cert", type=Path, help="TLS certificate (PEM); with --key, listen with TLS")
    p.add_argument("--key", type=Path, help="TLS private key (PEM)")
    p.add_argument("--keycloak-url", required=True, help="e.g. https://127.0.0.1:8443")
    p.add_argument("--realm", default="enmesh", help="Keycloak realm holding the users")
    p.add_argument("--client-id", default="enmesh-auth", help="realm client with direct grants")
    p.add_argument("--client-secret-file", type=Path, help="file holding that client's secret")
    p.add_argument("--keycloak-ca", type=Path, help="CA certificate Keycloak's TLS chains to")
    p.add_argument(
        "--lookup-secret-file",
        type=Path,
        help="secret of the service-account client that reads users' state; with it, "
        "a password Keycloak accepted is accepted again while the user is unchanged",
    )
    p.add_argument("--lookup-client-id", default=LOOKUP_CLIENT, help="that client's id")
    p.add_argument(
        "--scram",
        action="store_true",
        help="Keycloak has enmesh's provider (the keycloak role installs it): offer "
        "SCRAM-SHA-256 too, and read a user's state in one request (needs "
        "--lookup-secret-file)",
    )
    p.add_argument(
        "--remember-seconds",
        type=float,
        default=DEFAULT_MAX_AGE_SECONDS,
        help="how long a remembered login stands before a password grant is asked again",
    )
    p.add_argument("--log-level", default="INFO")
    return p


def _settings(args: argparse.Namespace) -> KeycloakSettings:
    secret = args.client_secret_file.read_text().strip() if args.client_secret_file else None
    ca = str(args.keycloak_ca) if args.keycloak_ca else None
    return KeycloakSettings(args.keycloak_url, args.realm, args.client_id, secret, ca)


def _tls(args: argparse.Namespace) -> ssl.SSLContext | None:
    if not args.cert and not args.key:
        return None
    if not (args.cert and args.key):
        raise SystemExit("enmesh-auth: --cert and --key go together")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(args.cert, args.key)
    return context


def _service(args: argparse.Namespace) -> AuthService:
    """PLAIN by password grants; with the service account, remembered logins, the
    console's access tokens (introspected) and SCRAM."""
    settings = _settings(args)
    grant = PasswordCheck(settings)
    if not args.lookup_secret_file:
        if args.scram:
            raise ValueError("--scram needs --lookup-secret-file (the account reads the keys)")
        return AuthService(grant)
    secret = args.lookup_secret_file.read_text().strip()
    lookup = UserLookup(settings, args.lookup_client_id, secret, provider=args.scram)
    remembering = RememberingCheck(grant, lookup, max_age=args.remember_seconds)
    check = TokenOrPasswordCheck(lookup, remembering)
    if not args.scram:
        return AuthService(check)
    return AuthService(check, lookup, decoy_key(secret))


async def _run(args: argparse.Namespace) -> None:
    service = _service(args)
    server = await asyncio.start_server(service.serve, args.host, args.port, ssl=_tls(args))
    host, port = server.sockets[0].getsockname()[:2]
    print(f"enmesh-auth listening on {host}:{port}", flush=True)  # readiness, for supervisors
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    try:
        asyncio.run(_run(args))
    except (OSError, ssl.SSLError, ValueError) as exc:
        print(f"enmesh-auth: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
