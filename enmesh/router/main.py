"""`enmesh-router --config FILE`: run one router of the mesh until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import cProfile
import json
import logging
import os
import resource
import signal
import sys
import time
from pathlib import Path

from enmesh.router.admission import AdmissionSettings, load_admission
from enmesh.router.config import RouterConfigError, load_router_config
from enmesh.router.engine import Loop
from enmesh.router.log_level import configured_level
from enmesh.router.management import Management
from enmesh.router.reconfigure import LiveConfig
from enmesh.router.reload import Reloader
from enmesh.router.router import Router


class JsonFormatter(logging.Formatter):
    """One JSON object per line: easy for people to read and for log shippers to parse."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def raise_descriptor_limit() -> int:
    """Thousands of connections need descriptors: take the hard limit the host allows."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="enmesh-router",
        description="Run one enmesh router (AMQP 1.0) from a qdrouterd.conf-format file.",
    )
    parser.add_argument("--config", required=True, type=Path, help="router configuration file")
    parser.add_argument(
        "--admission",
        type=Path,
        help="login throttling and handshake limits (auth/admission.json from `enmesh render`;"
        " built-in defaults without it)",
    )
    parser.add_argument(
        "--watch-config",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="also reload when the files' contents change, checked every SECONDS (for a "
        "Kubernetes Secret or ConfigMap updated in place; default 0: on SIGHUP only)",
    )
    parser.add_argument(
        "--will-store",
        type=Path,
        metavar="FILE",
        help="keep clients' wills (`$lwt`) in this SQLite file, so a will whose connection "
        "ended with the process is published at the next start (default: in memory)",
    )
    parser.add_argument(
        "--log-level",
        choices=["debug", "info", "warning"],
        help="overrides the config's log DEFAULT enable (default: that, else info)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    logging.basicConfig(level=(args.log_level or "info").upper(), handlers=[handler])
    log = logging.getLogger("enmesh.router")
    try:
        config = load_router_config(args.config)
        admission = load_admission(args.admission) if args.admission else AdmissionSettings()
    except RouterConfigError as exc:
        print(f"enmesh-router: {exc}", file=sys.stderr)
        return 1

    configured = configured_level(config)
    if args.log_level is None and configured is not None:
        logging.getLogger().setLevel(configured)
    for warning in config.warnings:  # settings accepted without effect, one line each
        log.warning("%s", warning)
    raise_descriptor_limit()
    loop = Loop()
    router = Router(config, loop, admission, args.will_store)
    live = LiveConfig(router)
    try:
        router.start()
        router.management = Management(router, live)
        live.start_http()
    except RouterConfigError as exc:  # e.g. a connector's password file is unreadable
        print(f"enmesh-router: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(
            f"enmesh-router: cannot listen: {exc.strerror} ({exc.filename or ''})".rstrip(),
            file=sys.stderr,
        )
        return 1

    def stop(signum: int, _frame: object) -> None:
        log.info("signal %s: stopping", signal.Signals(signum).name)
        loop.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    router.reloader = Reloader(live, args.config, args.admission)
    router.reloader.install()  # SIGHUP: re-read the files, apply the difference
    if args.watch_config > 0:
        router.reloader.watch(args.watch_config)
    loop.install_signal_wakeup()
    log.info("router %s started", config.router.id)
    run_loop(loop, "ENMESH_ROUTER_PROFILE")
    return 0


def run_loop(loop: Loop, profile_variable: str) -> None:
    """Run the loop until stopped; under cProfile, dumped to the file the environment
    variable names, if it names one (benchmarks: where does the process spend its time?)."""
    profile_to = os.environ.get(profile_variable)
    if profile_to:
        profiler = cProfile.Profile()
        profiler.runcall(loop.run)
        profiler.dump_stats(profile_to)
    else:
        loop.run()


if __name__ == "__main__":
    sys.exit(main())
