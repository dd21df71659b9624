"""`enmesh-mqtt-gateway`: run the MQTT gateway and will service until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path

from enmesh.mqtt.gateway import Gateway, Listen, Settings
from enmesh.mqtt.mesh import RouterEndpoint
from enmesh.router.engine import Loop
from enmesh.router.main import JsonFormatter, raise_descriptor_limit, run_loop

KINDS = ("mqtt", "mqtts", "ws", "wss")


def _listen(text: str) -> Listen:
    """`KIND:HOST:PORT`, e.g. `mqtt:127.0.0.1:1883` (port 0: any free port)."""
    try:
        kind, host, port = text.split(":")
        if kind not in KINDS:
            raise ValueError
        return Listen(kind, host, int(port))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected KIND:HOST:PORT with KIND one of {', '.join(KINDS)}"
        ) from None


def _will_account(text: str) -> tuple[str, str, Path]:
    """`USER@SPACE=PASSWORD_FILE`."""
    identity, _, path = text.partition("=")
    if "@" not in identity or not path:
        raise argparse.ArgumentTypeError(f"{text!r}: expected USER@SPACE=PASSWORD_FILE")
    return identity, identity.rsplit("@", 1)[1], Path(path)


def parse_settings(argv: list[str] | None) -> tuple[Settings, str]:
    parser = argparse.ArgumentParser(
        prog="enmesh-mqtt-gateway",
        description="MQTT 3.1.1/5.0 gateway to the enmesh AMQP 1.0 router mesh, with wills.",
    )
    parser.add_argument("--router", required=True, help="amqp://HOST:PORT or amqps://HOST:PORT")
    parser.add_argument("--router-ca", type=Path, help="CA that signed the router's certificate")
    parser.add_argument(
        "--listen",
        type=_listen,
        action="append",
        required=True,
        help="KIND:HOST:PORT, KIND one of mqtt, mqtts, ws, wss (repeatable)",
    )
    parser.add_argument("--tls-cert", type=Path, help="certificate chain for mqtts/wss")
    parser.add_argument("--tls-key", type=Path, help="private key for mqtts/wss")
    parser.add_argument("--state-dir", type=Path, required=True, help="where wills are stored")
    parser.add_argument(
        "--will-account",
        type=_will_account,
        action="append",
        default=[],
        help="USER@SPACE=PASSWORD_FILE: publishes that space's wills left by a previous run",
    )
    parser.add_argument(
        "--addresses",
        type=Path,
        help="the compiled address index (mqtt/addresses.json): wildcard subscriptions "
        "match its multicast and topic addresses (without it they are refused)",
    )
    parser.add_argument("--max-packet-size", type=int, default=256 * 1024)
    parser.add_argument(
        "--max-session-expiry",
        type=float,
        default=86400.0,
        metavar="SECONDS",
        help="how long a persistent session (3.1.1 clean session 0; 5.0 expiry 'never', "
        "or longer) is kept while its device is away (default: one day)",
    )
    parser.add_argument(
        "--connection-per-device",
        action="store_true",
        help="open one AMQP connection per device rather than one per user (the plan's "
        "connection limit then counts devices; each costs a connection on the router)",
    )
    parser.add_argument("--log-level", choices=["debug", "info", "warning"], default="info")
    args = parser.parse_args(argv)
    accounts = {}
    for identity, space, path in args.will_account:
        try:
            accounts[space] = (identity, path.read_text().strip())
        except OSError as exc:
            parser.error(f"--will-account {identity}: cannot read {path}: {exc.strerror}")
    router = RouterEndpoint(args.router, str(args.router_ca) if args.router_ca else None)
    settings = Settings(
        router=router,
        listeners=tuple(args.listen),
        state_dir=args.state_dir,
        max_packet_size=args.max_packet_size,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        will_accounts=accounts,
        addresses=args.addresses,
        max_session_expiry=args.max_session_expiry,
        connection_per_device=args.connection_per_device,
    )
    return settings, args.log_level


def main(argv: list[str] | None = None) -> int:
    settings, level = parse_settings(argv)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    logging.basicConfig(level=level.upper(), handlers=[handler])
    log = logging.getLogger("enmesh.mqtt")
    raise_descriptor_limit()
    loop = Loop()
    gateway = Gateway(settings, loop)
    try:
        gateway.start()
    except (OSError, ValueError) as exc:
        print(f"enmesh-mqtt-gateway: cannot start: {exc}", file=sys.stderr)
        return 1

    def stop(signum: int, _frame: object) -> None:
        log.info("signal %s: stopping", signal.Signals(signum).name)
        loop.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    loop.install_signal_wakeup()
    ports = ", ".join(f"{kind} {port}" for kind, port in gateway.ports.items())
    log.info("mqtt gateway started (%s) in front of %s", ports, settings.router.url)
    run_loop(loop, "ENMESH_MQTT_PROFILE")
    gateway.stop()
    return 0
