"""Deploy the five-host site (molecule scenario `site`'s hosts) and time each stage.

Stages: create (boot the nspawn hosts; the Debian base and the wheelhouses are cached
and reported separately if built), cold `site.yml` over SSH, warm re-run (no change), a
rolling upgrade to a new enmesh build (`-e enmesh_serial=1`, one host at a time), a
host powered off and on until its router answers again and its broker node (which
listens only once it has rejoined the cluster), a Spark worker's host powered off and
on until the master has its worker back, destroy. Prints and
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
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.builds import new_build  # noqa: E402
from tests.support.mesh import wait_until  # noqa: E402
from tests.support.sites import SiteSpec, create, destroy, leftovers  # noqa: E402
from tests.support.sites.base import ensure_base  # noqa: E402
from tests.support.sites.debs import repository  # noqa: E402
from tests.support.sites.site import power_off, power_on  # noqa: E402
from tests.support.sites.wheels import spark_wheelhouse, wheelhouse  # noqa: E402

T = TypeVar("T")
RESULTS = ROOT / "benchmarks" / "results" / "site_deploy.json"
WHEELS_LINK = Path("/var/cache/enmesh-sites/wheels")
SPARK_WHEELS_LINK = Path("/var/cache/enmesh-sites/spark-wheels")
DEBS_LINK = Path("/var/cache/enmesh-sites/debs")
HOSTS = 5  # stacks/site.inventory.yml
MASTER_HOST, WORKER_HOST = 3, 4  # site-h3: the Spark master; site-h4: a worker only
MASTER_UI_PORT = 8180  # the spark role's enmesh_spark_master_ui_port


def _timed(label: str, figures: dict[str, float], action: Callable[[], T]) -> T:
    started = time.monotonic()
    result = action()
    figures[label] = round(time.monotonic() - started, 1)
    print(f"{label:<22} {figures[label]:>7.1f} s", flush=True)
    return result


def _playbook(*extra: str) -> None:
    env = dict(os.environ, ENMESH_SITES_WHEELHOUSE=str(WHEELS_LINK),
               ENMESH_SITES_SPARK_WHEELHOUSE=str(SPARK_WHEELS_LINK),
               ENMESH_SITES_DEBS=str(DEBS_LINK),
               ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
               PATH=f"{ROOT / '.venv/bin'}:{os.environ['PATH']}")  # fmt: skip
    argv = [str(ROOT / ".venv/bin/ansible-playbook"), "-i", "stacks/site.inventory.yml",
            "playbooks/site.yml", *extra]  # fmt: skip
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"site.yml failed:\n{done.stdout[-3000:]}")


def _answers(address: str, port: int) -> bool:
    try:
        socket.create_connection((address, port), timeout=1).close()
    except OSError:
        return False
    return True


def _worker_alive(master: str, address: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{master}:{MASTER_UI_PORT}/json/", timeout=2) as answer:
            workers = json.load(answer)["workers"]
    except OSError:
        return False
    return any(w["host"] == address and w["state"] == "ALIVE" for w in workers)


def _link(link: Path, target: Path) -> None:
    if link.is_symlink():
        link.unlink()
    link.symlink_to(target)


def main() -> int:
    spec = SiteSpec("site", HOSTS)
    figures: dict[str, float] = {}
    _timed("base (cached or built)", figures, ensure_base)
    _link(WHEELS_LINK, _timed("wheelhouse", figures, wheelhouse))
    _link(SPARK_WHEELS_LINK, _timed("spark wheelhouse", figures, spark_wheelhouse))
    _link(DEBS_LINK, _timed("debian packages", figures, repository))
    destroy(spec)
    try:
        hosts = _timed(f"create ({HOSTS} hosts)", figures, lambda: create(spec))
        _timed("site.yml cold", figures, _playbook)
        _timed("site.yml warm", figures, _playbook)
        with tempfile.TemporaryDirectory() as build:
            tree = new_build(Path(build), "site_deploy benchmark build")
            _timed("rolling upgrade", figures, lambda: _playbook(
                "-e", "enmesh_serial=1", "-e", f"enmesh_render_source_dir={tree}"))  # fmt: skip
        worker = hosts[WORKER_HOST]
        started = time.monotonic()
        power_off(spec, worker)
        power_on(spec, worker)
        master = hosts[MASTER_HOST].address
        wait_until(lambda: _worker_alive(master, worker.address), 300, "the worker back", 0.5)
        figures["spark worker back"] = round(time.monotonic() - started, 1)
        print(f"{'spark worker back':<22} {figures['spark worker back']:>7.1f} s", flush=True)
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
        "benchmark": "site_deploy", "hosts": HOSTS, "seconds": figures,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }, indent=2) + "\n")  # fmt: skip
    print(f"written to {RESULTS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
