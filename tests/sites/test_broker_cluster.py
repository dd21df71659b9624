"""The site's broker is a RabbitMQ cluster with a node on every host: one cluster, quorum
queues replicated on every node, and the host of a queue's leader powered off under a
producer of 1,000 persistent messages without losing one the mesh acknowledged."""

from __future__ import annotations

import re
import socket
import ssl
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from proton import ProtonException, Timeout

from enmesh.deploy.smoke import Stack
from tests.sites.clients import (
    RECEIVER,
    SENDER,
    SPACE,
    longest_wait,
    router_url,
    send_until_accepted,
)
from tests.sites.playbook import run_playbook
from tests.sites.whole import node_name, rabbitmqctl, running_nodes, vhosts_down, wait_until_whole
from tests.support.mesh import wait_until
from tests.support.sites import SiteSpec
from tests.support.sites.site import power_off, power_on

QUEUE = "events"  # a queue address of the iot space: quorum queue `iot.events`
BROKER_QUEUE = "iot.events"
VHOST = "enmesh"
MESSAGES = 1000
CUT_AFTER = 300  # acknowledged messages before the plug is pulled
DRAIN_SECONDS = 180.0


def _queue_members(host: Any, broker: dict[str, Any], address: str) -> dict[str, Any]:
    rows = rabbitmqctl(
        host,
        node_name(broker, address),
        "list_queues",
        "--vhost",
        VHOST,
        "name",
        "leader",
        "members",
    )
    return {row["name"]: row for row in rows}


def test_the_nodes_form_one_cluster_and_every_quorum_queue_has_a_replica_on_each(
    hosts: dict[str, Any], deployment: dict[str, Any]
) -> None:
    (broker,) = deployment["brokers"]
    everyone = {n["name"] for n in broker["nodes"]}
    assert len(everyone) == len(hosts) == 3
    for node in broker["nodes"]:
        assert running_nodes(hosts[node["host"]], broker, node["host"]) == everyone
    queues = _queue_members(hosts[broker["host"]], broker, broker["host"])
    assert BROKER_QUEUE in queues
    for name, row in queues.items():
        assert set(row["members"]) == everyone, f"{name} is replicated on {row['members']}"


def test_the_nodes_distribution_ports_speak_tls_and_refuse_a_peer_without_a_certificate(
    stack: Stack, deployment: dict[str, Any]
) -> None:
    """Erlang distribution crosses the site network: TLS with the broker's certificate
    from the stack's CA, and a peer that shows none is cut off before it may speak."""
    (broker,) = deployment["brokers"]
    context = ssl.create_default_context(cafile=str(stack.ca))
    context.check_hostname = False  # the chain is checked; the node's address is below
    for node in broker["nodes"]:
        address = (node["host"], broker["ports"]["dist"])
        with socket.create_connection(address, timeout=10) as raw, context.wrap_socket(raw) as tls:
            names = {value for _, value in tls.getpeercert()["subjectAltName"]}
            try:
                answer = tls.recv(1)  # TLS 1.3: the refusal comes after the handshake
            except (ssl.SSLError, ConnectionError):  # the alert, or a reset
                answer = b""
        assert node["host"] in names, f"{address}: the certificate names {names}"
        assert answer == b"", f"{address} answered a peer without a certificate: {answer!r}"


def test_a_node_with_its_vhost_down_is_mended_by_the_next_run(
    tmp_path: Path, hosts: dict[str, Any], deployment: dict[str, Any]
) -> None:
    """A node that serves its cluster but not the `enmesh` vhost (seen once on a fresh
    site) refuses every router connection; site.yml restarts the vhost, the routers come
    back to the node. The broker layer's playbook (rabbitmq.yml) runs the same role as
    site.yml's deploy play, in a fraction of its time."""
    (broker,) = deployment["brokers"]
    address = broker["nodes"][-1]["host"]
    host, node = hosts[address], node_name(broker, address)
    host.check_output(
        f"rabbitmqctl --node {node} eval "
        f"'rabbit_vhost_sup_sup:stop_and_delete_vhost(<<\"{VHOST}\">>).'"
    )
    assert vhosts_down(host, broker, address) == [VHOST]
    code, output = run_playbook(tmp_path, playbook="rabbitmq.yml")
    assert code == 0, output[-3000:]
    assert vhosts_down(host, broker, address) == []
    name = host.ansible.get_variables()["inventory_hostname"]
    task = r"TASK \[rabbitmq : Restart the virtual hosts that are down.*?\n\n"
    restarted = re.search(task, output, re.S)
    assert restarted is not None and f"changed: [{name}]" in restarted[0], output[-3000:]
    wait_until_whole(hosts, deployment)


class _Producer(threading.Thread):
    """Sends durable messages one at a time through one router, each again until the
    mesh accepts it (at least once): a release, a timeout or a lost connection resends
    it. Records when each was acknowledged."""

    def __init__(self, stack: Stack, url: str, bodies: list[str]) -> None:
        super().__init__(name="cluster-producer", daemon=True)
        self.stack, self.url, self.pending = stack, url, list(bodies)
        self.acknowledged: list[tuple[float, str]] = []
        self.retries: list[str] = []

    def run(self) -> None:
        deadline = time.monotonic() + 300
        while self.pending and time.monotonic() < deadline:
            try:
                with self.stack.connect(self.url, SENDER, SPACE) as connection:
                    sender = connection.create_sender(QUEUE)
                    while self.pending:
                        send_until_accepted(sender, self.pending[0], self.retries)
                        self.acknowledged.append((time.monotonic(), self.pending.pop(0)))
            except (ProtonException, OSError) as exc:
                self.retries.append(f"{type(exc).__name__}: {exc}")


def _drain(stack: Stack, url: str, prefix: str, want: set[str]) -> list[str]:
    """Receive until every body of `want` arrived, for at most DRAIN_SECONDS. Messages
    the dead host's consumers had checked out return to the queue only once the cluster
    declares that node down (Erlang's net_ticktime), so silence is not the end."""
    got: list[str] = []
    deadline = time.monotonic() + DRAIN_SECONDS
    with stack.connect(url, RECEIVER, SPACE) as receiving:
        receiver = receiving.create_receiver(QUEUE, credit=200)
        while not want <= set(got) and time.monotonic() < deadline:
            try:
                message = receiver.receive(timeout=max(0.1, deadline - time.monotonic()))
            except Timeout:
                break
            receiver.accept()
            if str(message.body).startswith(prefix):
                got.append(str(message.body))
    return got


def test_the_leaders_host_powered_off_under_a_producer_loses_no_acknowledged_message(
    stack: Stack, deployment: dict[str, Any], hosts: dict[str, Any], site: SiteSpec
) -> None:
    (broker,) = deployment["brokers"]
    first = broker["host"]
    leader = _queue_members(hosts[first], broker, first)[BROKER_QUEUE]["leader"]
    victim = next(h for h in site.host_list() if f"rabbit@{h.address}" == leader)
    entry = next(n["host"] for n in broker["nodes"] if n["host"] != victim.address)
    nonce = uuid.uuid4().hex
    producer = _Producer(
        stack, router_url(deployment, entry), [f"{nonce} {i}" for i in range(MESSAGES)]
    )
    producer.start()
    try:
        wait_until(
            lambda: len(producer.acknowledged) >= CUT_AFTER or not producer.is_alive(),
            120,
            f"{CUT_AFTER} messages acknowledged",
            interval=0.05,
        )
        cut_at = time.monotonic()
        power_off(site, victim)  # no shutdown: the plug is pulled
        producer.join(300)
        assert not producer.is_alive(), f"the producer is stuck: {producer.retries[-3:]}"
        acknowledged = {body for _, body in producer.acknowledged}
        assert len(acknowledged) == MESSAGES, f"not sent: {producer.retries[-3:]}"
        # Drained while the host is still off: the other two nodes hold every message.
        got = _drain(stack, router_url(deployment, entry), nonce, acknowledged)
        drained = time.monotonic() - cut_at
        # Where the missing ones are, if any, while the host is still off.
        stock = [
            row
            for node in broker["nodes"]
            if node["host"] != victim.address
            for row in rabbitmqctl(
                hosts[node["host"]],
                node["name"],
                "list_queues",
                "--local",
                "--vhost",
                VHOST,
                "name",
                "messages_ready",
                "messages_unacknowledged",
                "consumers",
            )
        ]
    finally:
        power_on(site, victim)
    lost = acknowledged - set(got)
    queue = [row for row in stock if row["name"] == BROKER_QUEUE]
    assert not lost, (
        f"{len(lost)} acknowledged messages not received, e.g. {sorted(lost)[:3]}; {queue}"
    )
    stalled = longest_wait(cut_at, producer.acknowledged)
    print(
        f"leader {leader} powered off after {CUT_AFTER} acknowledged: {MESSAGES} acknowledged, "
        f"{len(got)} received ({len(got) - len(set(got))} duplicates, "
        f"{len(producer.retries)} resends); the producer's longest wait after the cut "
        f"{stalled:.2f} s; the last message received {drained:.1f} s after the cut"
    )

    # Its unit starts the node at boot; it rejoins the cluster and the queue's replica.
    everyone = {n["name"] for n in broker["nodes"]}
    wait_until(
        lambda: running_nodes(hosts[entry], broker, entry) == everyone,
        180,
        f"{victim.address} rejoining the cluster",
        interval=1,
    )
    members = _queue_members(hosts[entry], broker, entry)[BROKER_QUEUE]["members"]
    assert set(members) == everyone
    wait_until_whole(hosts, deployment)  # the routers connected to it again
