"""The RabbitMQ nodes of a broker: one for a lone broker, one per host for a cluster.

A cluster on hosts (`spec.brokers[].nodes`) is one broker to the model, as the
Kubernetes cluster is: the same definitions on every node, quorum queues replicated
across them. Its nodes find each other from the list in their rabbitmq.conf
(`classic_config`), share an Erlang cookie from a deploy secret, are named by their
host address (long names), so no DNS is needed on the site, and speak Erlang
distribution over TLS with the broker's certificate.

Each router connects to every node (one connector per node, named `<broker>.<index>`,
which no broker name can be): losing a node's host closes only that connection, and
the queues' autolinks on the others keep serving, on any AMQP router engine.
"""

from __future__ import annotations

from dataclasses import dataclass

from enmesh.compile.stack import Broker

# The Erlang cookie the nodes of a cluster share (`<secret>/<key>` in the secrets dir).
CLUSTER_COOKIE_SECRET = "enmesh-broker-cluster"
CLUSTER_COOKIE_KEY = "cookie"
LONE_NODE_NAME = "rabbit@localhost"  # distribution stays on loopback


@dataclass(frozen=True)
class BrokerNode:
    broker: str
    index: int
    host: str  # where it listens and routers reach it
    erlang_name: str  # the node name the CLI tools address
    connection: str  # the routers' connector to it
    config: str  # its rabbitmq.conf, relative to the build directory


def inter_node_tls_file(spec: Broker) -> str:
    """A cluster's TLS options of Erlang distribution, relative to the build directory."""
    return f"brokers/{spec.name}.inter_node_tls.config"


def is_cluster(spec: Broker) -> bool:
    return bool(spec.nodes)


def speaks_tls_distribution(spec: Broker) -> bool:
    """Nodes that reach each other over a network (a cluster on hosts, or Kubernetes
    pods found by peer discovery) speak Erlang distribution over TLS; a lone node keeps
    it on loopback."""
    return is_cluster(spec) or spec.peerDiscovery is not None


def broker_nodes(spec: Broker) -> tuple[BrokerNode, ...]:
    if not is_cluster(spec):
        return (
            BrokerNode(
                broker=spec.name,
                index=0,
                host=spec.host,
                erlang_name=LONE_NODE_NAME,
                connection=spec.name,
                config=f"brokers/{spec.name}.rabbitmq.conf",
            ),
        )
    return tuple(
        BrokerNode(
            broker=spec.name,
            index=i,
            host=host,
            erlang_name=f"rabbit@{host}",
            connection=f"{spec.name}.{i}",
            config=f"brokers/{spec.name}.{i}.rabbitmq.conf",
        )
        for i, host in enumerate(spec.nodes)
    )
