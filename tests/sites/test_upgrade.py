"""A rolling upgrade of the whole site: a new enmesh build deployed one host at a time
(`site.yml -e enmesh_serial=1 -e enmesh_render_source_dir=<new build>`) while a steady
producer and consumer use a quorum queue through the mesh, each moving to another router
when its own restarts. The release also changes the broker configuration, so the
cluster's nodes restart too: one at a time (role `rabbitmq_restart`,
playbooks/rabbitmq_restart.yml), each drained, restarted, revived and back in its cluster
before the next one stops. Every message the mesh acknowledged arrives (duplicates
counted)."""

from __future__ import annotations

import hashlib
import itertools
import os
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from enmesh.deploy.smoke import Stack
from tests.sites.clients import longest_wait
from tests.sites.conftest import ROOT, STACK
from tests.sites.playbook import run_playbook, slowest_tasks
from tests.sites.steady import RATE, steady_traffic
from tests.sites.whole import rabbitmqctl, wait_until_whole
from tests.support.builds import new_build

INSTALLED = "/opt/enmesh/installed.sha1"  # enmesh_base records the archive it installed
JOB_INSTALL = "/var/lib/enmesh/spark/job-install.sha1"  # the spark role: what the job runs
WHEELHOUSES = ("ENMESH_SITES_WHEELHOUSE", "ENMESH_SITES_SPARK_WHEELHOUSE", "ENMESH_SITES_DEBS")
# What the rabbitmq role records a node was started with (its input files' checksums); a
# record that no longer matches is what a changed rabbitmq.conf leaves on the node.
BROKER_RECORD = "/etc/rabbitmq/enmesh.started-with"


def _installed(hosts: dict[str, Any]) -> dict[str, str]:
    return {address: host.file(INSTALLED).content_string.strip() for address, host in hosts.items()}


def _router_pids(hosts: dict[str, Any], deployment: dict[str, Any]) -> dict[str, int]:
    return {
        r["id"]: hosts[r["host"]].service(f"enmesh-router-{r['id']}").systemd_properties["MainPID"]
        for r in deployment["routers"]
    }


def _down(host: Any, unit: str, node: str, since: float) -> tuple[float, float]:
    """When the node's unit was last stopped after `since`, and when the node had
    started again (its log's "Server startup complete"), as UNIX times."""
    stops = host.check_output(
        f"journalctl -u {unit} --since @{int(since)} -o short-unix --no-pager"
        " | grep -F ' Stopping ' | tail -n 1"
    )
    assert stops, f"{node} was not restarted"
    started = host.check_output(
        f"grep -F 'Server startup complete' /var/log/rabbitmq/{node}.log | tail -n 1"
    )
    stamp = started.split(" [")[0]  # 2026-11-28 10:53:44.316873+00:00
    return float(stops.split()[0]), datetime.fromisoformat(stamp).timestamp()


def _broker_restarts(
    hosts: dict[str, Any], deployment: dict[str, Any], since: float
) -> list[tuple[float, float]]:
    """Each broker node's down window since `since`; none may overlap another, and no
    node may be left drained."""
    (broker,) = deployment["brokers"]
    unit = f"enmesh-rabbitmq-{broker['name']}"
    windows = sorted(_down(hosts[n["host"]], unit, n["name"], since) for n in broker["nodes"])
    overlapping = [(a, b) for a, b in itertools.pairwise(windows) if b[0] < a[1]]
    assert not overlapping, f"nodes down at the same time (stopped, running again): {windows}"
    first = broker["nodes"][0]
    status = rabbitmqctl(hosts[first["host"]], first["name"], "cluster_status")
    drained = {
        n: s for n, s in status["maintenance_status"].items() if s != "not under maintenance"
    }
    assert not drained, f"nodes left drained: {drained}"
    return windows


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
    since = time.time()
    for node in deployment["brokers"][0]["nodes"]:
        hosts[node["host"]].check_output(f"echo changed-since > {BROKER_RECORD}")
    before, pids_before = _installed(every_host), _router_pids(hosts, deployment)
    tree = new_build(tmp_path / "build", f"rolling upgrade {uuid.uuid4().hex}")

    with steady_traffic(stack, deployment) as (producer, consumer):
        upgrade_began = time.monotonic()
        code, output = run_playbook(
            tmp_path, extra_vars={"enmesh_serial": "1", "enmesh_render_source_dir": str(tree)}
        )
        upgraded_in = time.monotonic() - upgrade_began
        assert code == 0, output[-4000:]
    print(f"the serial run's {slowest_tasks(output)}")
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
    windows = _broker_restarts(hosts, deployment, since)
    wait_until_whole(hosts, deployment)

    stalled = longest_wait(upgrade_began, producer.acknowledged)
    longest_down = max(ready - stopped for stopped, ready in windows)
    print(
        f"rolling upgrade of {len(every_host)} hosts in {upgraded_in:.1f} s under {RATE:g} "
        f"msg/s, {len(windows)} broker nodes restarted one at a time (each down at most "
        f"{longest_down:.1f} s): {len(acknowledged)} acknowledged, {len(consumer.got)} "
        f"received ({len(consumer.got) - len(set(consumer.got))} duplicates), none lost; "
        f"the producer's longest wait {stalled:.2f} s; reconnects: producer "
        f"{len(producer.reconnects)}, consumer {len(consumer.reconnects)}"
    )
