"""Deploy the three-host site (molecule scenario `site`'s hosts) and time each stage.

Stages: create (boot the nspawn hosts; the Debian base and the wheelhouse are cached and
reported separately if built), cold `site.yml` over SSH, warm re-run (no change), a
host powered off and on until its router answers again and its broker node (which
listens only once it has rejoined the cluster), destroy. Prints and
records benchmarks/results/site_deploy.json. No target yet; issue 23 asks for the
figures. Run as root from the checkout:

    .venv/bin/python benchmarks/site_deploy.py
"""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.sites import SiteSpec, create, destroy, leftovers  # noqa: E402
from tests.support.sites.base import ensure_base  # noqa: E402
from tests.support.sites.site import power_off, power_on  # noqa: E402
from tests.support.sites.wheels import wheelhouse  # noqa: E402

T = TypeVar("T")
RESULTS = ROOT / "benchmarks" / "results" / "site_deploy.json"
WHEELS_LINK = Path("/var/cache/enmesh-sites/wheels")


def _timed(label: str, figures: dict[str, float], action: Callable[[], T]) -> T:
    started = time.monotonic()
    result = action()
    figures[label] = round(time.monotonic() - started, 1)
    print(f"{label:<22} {figures[label]:>7.1f} s", flush=True)
    return result


def _playbook() -> None:
    env = dict(os.environ, ENMESH_SITES_WHEELHOUSE=str(WHEELS_LINK),
               ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
               PATH=f"{ROOT / '.venv/bin'}:{os.environ['PATH']}")  # fmt: skip
    argv = [str(ROOT / ".venv/bin/ansible-playbook"), "-i", "stacks/site.inventory.yml",
            "playbooks/site.yml"]  # fmt: skip
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"site.yml failed:\n{done.stdout[-3000:]}")


def _answers(address: str, port: int) -> bool:
    try:
        socket.create_connection((address, port), timeout=1).close()
    except OSError:
        return False
    return True


def main() -> int:
    spec = SiteSpec("site", 3)
    figures: dict[str, float] = {}
    _timed("base (cached or built)", figures, ensure_base)
    wheels = _timed("wheelhouse", figures, wheelhouse)
    if WHEELS_LINK.is_symlink():
        WHEELS_LINK.unlink()
    WHEELS_LINK.symlink_to(wheels)
    destroy(spec)
    try:
        hosts = _timed("create (3 hosts)", figures, lambda: create(spec))
        _timed("site.yml cold", figures, _playbook)
        _timed("site.yml warm", figures, _playbook)
        victim = hosts[0]  # a router and a node of the broker cluster
        started = time.monotonic()
        power_off(spec, victim)
        power_on(spec, victim)
        waiting = {"router host back": 5671, "broker node back": 25671}
        while waiting:
            for label, port in list(waiting.items()):
                if _answers(victim.address, port):
                    figures[label] = round(time.monotonic() - started, 1)
                    print(f"{label:<22} {figures[label]:>7.1f} s", flush=True)
                    del waiting[label]
            time.sleep(0.2)
    finally:
        _timed("destroy", figures, lambda: destroy(spec))
    assert not leftovers(spec), leftovers(spec)
    RESULTS.write_text(json.dumps({
        "benchmark": "site_deploy", "hosts": 3, "seconds": figures,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }, indent=2) + "\n")  # fmt: skip
    print(f"written to {RESULTS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
