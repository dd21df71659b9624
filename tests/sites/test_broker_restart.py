"""A changed broker configuration on a running site restarts the cluster's nodes one at
a time (role `rabbitmq_restart`, playbooks/rabbitmq_restart.yml: serial: 1):
each node drained, restarted, revived and back in its cluster before the next one stops,
while a steady producer and consumer use a quorum queue through the mesh, losing
nothing."""

from __future__ import annotations

import itertools
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from enmesh.deploy.smoke import Stack
from tests.sites.clients import longest_wait
from tests.sites.playbook import run_site_yml
from tests.sites.steady import RATE, steady_traffic
from tests.sites.whole import rabbitmqctl, wait_until_whole

# What the role records a node was started with (its input files' checksums); a record
# that no longer matches is what a changed rabbitmq.conf leaves on the node.
RECORD = "/etc/rabbitmq/enmesh.started-with"


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


def test_a_changed_configuration_restarts_the_nodes_one_at_a_time_losing_nothing(
    tmp_path: Path, stack: Stack, deployment: dict[str, Any], hosts: dict[str, Any]
) -> None:
    (broker,) = deployment["brokers"]
    unit = f"enmesh-rabbitmq-{broker['name']}"
    since = time.time()
    for node in broker["nodes"]:
        hosts[node["host"]].check_output(f"echo changed-since > {RECORD}")
    with steady_traffic(stack, deployment) as (producer, consumer):
        began = time.monotonic()
        code, output = run_site_yml(tmp_path)
        took = time.monotonic() - began
        assert code == 0, output[-4000:]
    acknowledged = {body for _, body in producer.acknowledged}

    windows = sorted(_down(hosts[n["host"]], unit, n["name"], since) for n in broker["nodes"])
    overlapping = [(a, b) for a, b in itertools.pairwise(windows) if b[0] < a[1]]
    assert not overlapping, f"nodes down at the same time (stopped, running again): {windows}"
    first = broker["nodes"][0]
    status = rabbitmqctl(hosts[first["host"]], first["name"], "cluster_status")
    drained = {
        n: s for n, s in status["maintenance_status"].items() if s != "not under maintenance"
    }
    assert not drained, f"nodes left drained: {drained}"
    wait_until_whole(hosts, deployment)

    longest_down = max(ready - stopped for stopped, ready in windows)
    print(
        f"{len(windows)} broker nodes restarted one at a time in a {took:.1f} s run under "
        f"{RATE:g} msg/s: each down at most {longest_down:.1f} s; {len(acknowledged)} "
        f"acknowledged, {len(consumer.got)} received "
        f"({len(consumer.got) - len(set(consumer.got))} duplicates), none lost; the "
        f"producer's longest wait {longest_wait(began, producer.acknowledged):.2f} s"
    )
