"""A RabbitMQ cluster on hosts (`spec.brokers[].nodes`): what the compiler makes of it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from enmesh.compile import compile_stack_file
from enmesh.compile.stack import Broker
from tests.unit.test_compile_semantics import entities

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "stacks" / "site.stack.yml"
NODES = ["192.168.251.11", "192.168.251.12", "192.168.251.13"]


@pytest.fixture(scope="module")
def site() -> dict[str, str]:
    return compile_stack_file(SITE)[1].files


def _conf_lines(conf: str) -> dict[str, str]:
    return dict(
        line.split(" = ", 1) for line in conf.splitlines() if " = " in line and line[0] != "#"
    )


def test_each_node_gets_its_own_rabbitmq_conf_naming_every_peer(site: dict[str, str]) -> None:
    for i, host in enumerate(NODES):
        conf = _conf_lines(site[f"brokers/broker-0.{i}.rabbitmq.conf"])
        assert conf["listeners.ssl.default"] == f"{host}:25671"
        assert conf["distribution.listener.interface"] == host  # the site, not a wildcard
        assert conf["cluster_formation.peer_discovery_backend"] == "classic_config"
        peers = [conf[f"cluster_formation.classic_config.nodes.{k}"] for k in (1, 2, 3)]
        assert peers == [f"rabbit@{h}" for h in NODES]
        assert conf["cluster_partition_handling"] == "pause_minority"
        # A dead node is declared down after 15 s, not Erlang's 60 (publishes wait for it).
        assert conf["net_ticktime"] == "15"
    assert "brokers/broker-0.rabbitmq.conf" not in site  # no node without a host
    assert "brokers/broker-0.definitions.json" in site  # one set of definitions for all


def test_a_lone_broker_keeps_erlangs_tick_time_and_distribution_on_loopback() -> None:
    files = compile_stack_file(ROOT / "stacks" / "local.stack.yml")[1].files
    confs = [text for path, text in files.items() if path.endswith(".rabbitmq.conf")]
    assert confs
    for conf in map(_conf_lines, confs):
        assert "net_ticktime" not in conf
        assert conf["distribution.listener.interface"] == "127.0.0.1"
    assert not [path for path in files if path.endswith(".inter_node_tls.config")]


def test_every_router_connects_to_every_node_and_links_stored_addresses_through_each(
    site: dict[str, str],
) -> None:
    for router in ("site-router-0", "site-router-1", "site-router-2"):
        conf = site[f"routers/{router}.conf"]
        brokers = {
            c["name"]: c["host"]
            for c in entities(conf, "connector")
            if c["role"] == "route-container"
        }
        assert brokers == {f"broker-0.{i}": host for i, host in enumerate(NODES)}
        queue_links = {
            (a["direction"], a["connection"])
            for a in entities(conf, "autoLink")
            if a["address"] == "iot/events"
        }
        assert queue_links == {(d, f"broker-0.{i}") for d in ("in", "out") for i in range(3)}
        topic_routes = {
            r["connection"] for r in entities(conf, "linkRoute") if r["prefix"] == "iot/alerts"
        }
        assert topic_routes == {f"broker-0.{i}" for i in range(3)}


def test_deployment_lists_the_nodes_and_the_shared_cookie(site: dict[str, str]) -> None:
    deployment = json.loads(site["deploy.json"])
    (broker,) = deployment["brokers"]
    assert [n["name"] for n in broker["nodes"]] == [f"rabbit@{h}" for h in NODES]
    assert broker["cookie"] == {"secret": "enmesh-broker-cluster", "key": "cookie"}
    assert broker["interNodeTls"] == "brokers/broker-0.inter_node_tls.config"
    assert {"name": "enmesh-broker-cluster", "key": "cookie"}.items() <= next(
        s for s in deployment["secrets"] if s["name"] == "enmesh-broker-cluster"
    ).items()
    (certificate,) = broker["certificates"]
    assert set(NODES) <= set(certificate["dnsNames"])  # routers verify each node's name


def test_the_nodes_speak_erlang_distribution_over_mutually_verified_tls(
    site: dict[str, str],
) -> None:
    options = site["brokers/broker-0.inter_node_tls.config"]
    server, client = options.split("{client, [")
    for side in (server, client):
        assert '{certfile, "/var/lib/enmesh/tls/broker-0.crt"}' in side
        assert '{cacertfile, "/var/lib/enmesh/tls/ca.crt"}' in side
        assert "{verify, verify_peer}" in side
    assert "{fail_if_no_peer_cert, true}" in server  # a peer without the CA's cert is refused
    assert "{versions, ['tlsv1.3', 'tlsv1.2']}" in server  # the stack's TLS policy


def _broker(**fields: Any) -> Broker:
    return Broker.model_validate({"name": "b", **fields})


def test_a_cluster_takes_its_first_node_as_host() -> None:
    assert _broker(nodes=NODES).host == NODES[0]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"nodes": NODES[:2]}, "at least 3 hosts"),
        ({"nodes": [NODES[0], NODES[1], NODES[0]]}, "repeated: 192.168.251.11"),
        ({"nodes": NODES, "host": NODES[2]}, "a cluster's host is its first node"),
        ({"nodes": NODES, "listenHost": "0.0.0.0"}, "no listenHost"),
    ],
)
def test_a_cluster_that_cannot_work_is_refused(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        _broker(**fields)


def test_a_lone_broker_has_no_cookie_and_keeps_its_file_names() -> None:
    files = compile_stack_file(ROOT / "stacks" / "local.stack.yml")[1].files
    deployment = json.loads(files["deploy.json"])
    assert all(b["cookie"] is None and b["interNodeTls"] is None for b in deployment["brokers"])
    assert not any(name.endswith("inter_node_tls.config") for name in files)
    assert not any(s["name"] == "enmesh-broker-cluster" for s in deployment["secrets"])
    for broker in deployment["brokers"]:
        (node,) = broker["nodes"]
        assert node == {
            "host": broker["host"],
            "name": "rabbit@localhost",
            "config": f"brokers/{broker['name']}.rabbitmq.conf",
        }
        conf = _conf_lines(files[node["config"]])
        assert conf["distribution.listener.interface"] == "127.0.0.1"
