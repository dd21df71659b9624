"""A rolling upgrade of the whole site: a new enmesh build deployed one host at a time
(`site.yml -e enmesh_serial=1 -e enmesh_render_source_dir=<new build>`) while a steady
producer and consumer use a queue through the mesh, each moving to another router when
its own restarts. Every message the mesh acknowledged arrives (duplicates counted)."""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from pathlib import Path
from typing import Any

from enmesh.deploy.smoke import Stack
from tests.sites.clients import longest_wait
from tests.sites.conftest import ROOT, STACK
from tests.sites.playbook import run_site_yml
from tests.sites.steady import RATE, steady_traffic
from tests.support.builds import new_build

INSTALLED = "/opt/enmesh/installed.sha1"  # enmesh_base records the archive it installed
JOB_INSTALL = "/var/lib/enmesh/spark/job-install.sha1"  # the spark role: what the job runs
WHEELHOUSES = ("ENMESH_SITES_WHEELHOUSE", "ENMESH_SITES_SPARK_WHEELHOUSE", "ENMESH_SITES_DEBS")


def _installed(hosts: dict[str, Any]) -> dict[str, str]:
    return {address: host.file(INSTALLED).content_string.strip() for address, host in hosts.items()}


def _router_pids(hosts: dict[str, Any], deployment: dict[str, Any]) -> dict[str, int]:
    return {
        r["id"]: hosts[r["host"]].service(f"enmesh-router-{r['id']}").systemd_properties["MainPID"]
        for r in deployment["routers"]
    }


def test_a_rolling_upgrade_under_a_steady_producer_and_consumer_loses_nothing(  # noqa: PLR0917
    tmp_path: Path,
    stack: Stack,
    deployment: dict[str, Any],
    hosts: dict[str, Any],
    spark_hosts: dict[str, Any],
    spark_master: str,
) -> None:
    missing = [name for name in WHEELHOUSES if not os.environ.get(name)]
    assert not missing, f"set {missing}: the hosts install the new build from them"
    every_host = hosts | spark_hosts
    # As on a host where apt installed rabbitmq-server: Debian's epmd socket enabled (on
    # every interface, port 4369). The run must mask it before a reboot lets it take the
    # port from the broker's own epmd.
    broker_host = hosts[deployment["brokers"][0]["host"]]
    broker_host.check_output("systemctl unmask epmd.socket && systemctl enable epmd.socket")
    before, pids_before = _installed(every_host), _router_pids(hosts, deployment)
    tree = new_build(tmp_path / "build", f"rolling upgrade {uuid.uuid4().hex}")

    with steady_traffic(stack, deployment) as (producer, consumer):
        upgrade_began = time.monotonic()
        code, output = run_site_yml(
            tmp_path, extra_vars={"enmesh_serial": "1", "enmesh_render_source_dir": str(tree)}
        )
        upgraded_in = time.monotonic() - upgrade_began
        assert code == 0, output[-4000:]
    acknowledged = {body for _, body in producer.acknowledged}

    archive = ROOT / "build" / STACK / "enmesh-src.tar.gz"
    new = hashlib.sha1(archive.read_bytes()).hexdigest()  # what Ansible's copy records
    after = _installed(every_host)
    assert set(after.values()) == {new} and new not in set(before.values()), (before, after)
    job = spark_hosts[spark_master].file(JOB_INSTALL).content_string.strip()
    assert job == new, "the telemetry job still runs the old build"
    debian_epmd = broker_host.run("systemctl is-enabled epmd.socket").stdout.strip()
    assert debian_epmd == "masked", f"Debian's epmd.socket is {debian_epmd} after the run"
    pids_after = _router_pids(hosts, deployment)
    assert all(pids_after[r] != pids_before[r] for r in pids_before), "a router kept running"

    stalled = longest_wait(upgrade_began, producer.acknowledged)
    print(
        f"rolling upgrade of {len(every_host)} hosts in {upgraded_in:.1f} s under {RATE:g} "
        f"msg/s: {len(acknowledged)} acknowledged, {len(consumer.got)} received "
        f"({len(consumer.got) - len(set(consumer.got))} duplicates), none lost; the "
        f"producer's longest wait {stalled:.2f} s; reconnects: producer "
        f"{len(producer.reconnects)}, consumer {len(consumer.reconnects)}"
    )
