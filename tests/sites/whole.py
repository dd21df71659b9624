"""The site as a fault test must leave it: every broker node running in its cluster, and
every router connected to every other router and to every broker node.

A host powered on again is reachable over SSH well before its RabbitMQ node has rejoined
and the routers have reconnected to it (backoff); a check that ran meanwhile would meet
a cluster coming back, not the fault it means to test."""

from __future__ import annotations

import json
import re
from typing import Any

from tests.sites.clients import router_metrics
from tests.support.mesh import samples, wait_until

# A RabbitMQ node's boot and rejoin, then the routers' backoff; make test runs the site
# beside pytest, so a loaded 2-core machine must fit in it too.
RECOVERY_SECONDS = 420.0


def rabbitmqctl(host: Any, node: str, *args: str) -> Any:
    out = host.check_output(" ".join(["rabbitmqctl", "--node", node, *args, "--formatter", "json"]))
    return json.loads(out)


def node_name(broker: dict[str, Any], address: str) -> str:
    return str(next(n["name"] for n in broker["nodes"] if n["host"] == address))


def running_nodes(host: Any, broker: dict[str, Any], address: str) -> set[str]:
    return set(rabbitmqctl(host, node_name(broker, address), "cluster_status")["running_nodes"])


def vhosts_down(host: Any, broker: dict[str, Any], address: str) -> list[str]:
    """The virtual hosts down on one node while its cluster may serve them elsewhere."""
    node = node_name(broker, address)
    # its answer on stderr to stdout: the SSH client writes its own warnings to stderr
    check = host.run(
        f"rabbitmq-diagnostics --node {node} check_virtual_hosts --formatter json 2>&1"
    )
    if check.rc == 0:
        return []
    if check.rc != 69:  # 69: some are down; anything else: the node did not answer
        raise RuntimeError(f"{node}: check_virtual_hosts exited {check.rc}: {check.stdout}")
    return list(json.loads(check.stdout)["down_vhosts"])


def _connections(router: dict[str, Any]) -> dict[str, int]:
    """The router's open connections by role; empty if it does not answer."""
    try:
        text = router_metrics(router)
    except OSError:
        return {}
    found = samples(text, "enmesh_router_connections")
    return {role[1]: n for labels, n in found if (role := re.search(r'role="([^"]+)"', labels))}


def _meshed(deployment: dict[str, Any]) -> bool:
    nodes = sum(len(b["nodes"]) for b in deployment["brokers"])
    wanted = {"inter-router": len(deployment["routers"]) - 1, "route-container": nodes}
    for router in deployment["routers"]:
        got = _connections(router)
        if any(got.get(role, 0) != count for role, count in wanted.items()):
            return False
    return True


def _vhost_log(host: Any, broker: dict[str, Any], address: str) -> str:
    """The node's last log lines about virtual hosts: why one is down."""
    log = f"/var/log/rabbitmq/{node_name(broker, address)}.log"
    found = host.run(f"grep -i -E 'vhost|recover' {log} | tail -n 8 | cut -c 1-300")
    return str(found.stdout).strip()


def _cluster_problem(hosts: dict[str, Any], deployment: dict[str, Any]) -> str | None:
    """What keeps the brokers from being whole, or None."""
    for broker in deployment["brokers"]:
        everyone = {n["name"] for n in broker["nodes"]}
        for node in broker["nodes"]:
            host = hosts[node["host"]]
            try:
                running = running_nodes(host, broker, node["host"])
                down = vhosts_down(host, broker, node["host"])
            except (AssertionError, RuntimeError, ValueError) as exc:  # not answering yet
                return f"{node['name']} does not answer: {str(exc)[-300:]}"
            if running != everyone:
                return f"{node['name']} runs with {sorted(running)} only"
            if down:
                log = _vhost_log(host, broker, node["host"])
                return f"{node['name']} has {down} down; its log: {log}"
    return None


def wait_until_whole(hosts: dict[str, Any], deployment: dict[str, Any]) -> None:
    """Wait until every broker node runs in its cluster and every router has all its
    inter-router and broker connections back."""
    problem: list[str | None] = [None]

    def clustered() -> bool:
        problem[0] = _cluster_problem(hosts, deployment)
        return problem[0] is None

    try:
        wait_until(
            clustered,
            RECOVERY_SECONDS,
            "every broker node running in its cluster with all its virtual hosts",
            interval=2,
        )
    except TimeoutError as exc:
        raise TimeoutError(f"{exc}; at the end: {problem[0]}") from None
    wait_until(
        lambda: _meshed(deployment),
        RECOVERY_SECONDS,
        "every router connected to every other router and every broker node",
        interval=1,
    )
