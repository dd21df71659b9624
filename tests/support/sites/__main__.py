"""`python -m tests.support.sites create|destroy|check|power-off|power-on` (molecule's
create and destroy playbooks call this)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from tests.support.sites.debs import repository
from tests.support.sites.site import (
    SiteError,
    SiteSpec,
    create,
    destroy,
    leftovers,
    power_off,
    power_on,
)
from tests.support.sites.wheels import spark_wheelhouse, wheelhouse


def _link(link: Path, target: Path) -> None:
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(target)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.sites")
    parser.add_argument("action", choices=["create", "destroy", "check", "power-off", "power-on"])
    parser.add_argument("--name", default="site")
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument("--network", default="192.168.251.0/24")
    parser.add_argument(
        "--wheelhouse-link", type=Path, help="create: point this symlink at the hosts' wheels"
    )
    parser.add_argument(
        "--spark-wheelhouse-link", type=Path, help="create: point this symlink at PySpark's wheels"
    )
    parser.add_argument(
        "--debs-link", type=Path, help="create: point this symlink at the hosts' Debian packages"
    )
    parser.add_argument("--host", type=int, help="host index for power-off/power-on")
    args = parser.parse_args(argv)
    try:
        spec = SiteSpec(args.name, args.hosts, args.network)
        started = time.monotonic()
        if args.action == "create":
            if args.wheelhouse_link:
                _link(args.wheelhouse_link, wheelhouse())
            if args.spark_wheelhouse_link:
                _link(args.spark_wheelhouse_link, spark_wheelhouse())
            if args.debs_link:
                _link(args.debs_link, repository())
            for host in create(spec):
                print(f"{host.name} {host.address} up")
        elif args.action == "destroy":
            destroy(spec)
        elif args.action in ("power-off", "power-on"):
            if args.host is None:
                parser.error(f"{args.action} needs --host INDEX")
            host = spec.host_list()[args.host]
            (power_off if args.action == "power-off" else power_on)(spec, host)
        left = leftovers(spec)
        if args.action in ("destroy", "check") and left:
            print("left behind: " + ", ".join(left), file=sys.stderr)
            return 1
        print(f"site {spec.name}: {args.action} done in {time.monotonic() - started:.1f}s")
        return 0
    except SiteError as exc:
        print(f"site {args.name}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
