"""Model + layout -> RabbitMQ definitions JSON, one file per broker.

Queues are quorum queues (durable, replicated when the broker is a cluster, and the
only RabbitMQ queue type with a delivery limit). Per-address settings are queue
arguments; per-tenant behaviour that may change later is a policy.
"""

from __future__ import annotations

import re
from typing import Any

from enmesh.compile.broker_nodes import BrokerNode, broker_nodes, is_cluster
from enmesh.compile.errors import CompileError
from enmesh.compile.layout import ROUTER_BROKER_USER, STANDARD_BROKER_VHOST, Layout
from enmesh.compile.stack import Broker as StackBroker
from enmesh.compile.tls import rabbitmq_ssl_lines, versions
from enmesh.model import Address, AddressType, Operation, Tenant

Definitions = dict[str, Any]
TEMPORARY_QUEUE_TTL_MS = 60_000
HEARTBEAT_SECONDS = 5  # a silent router is dropped after about 25 s (rabbitmq_conf)
CLUSTER_NET_TICKTIME = 15  # seconds; see _distribution


def _queue_arguments(layout: Layout, tenant: Tenant, address: Address) -> dict[str, Any]:
    spec = address.spec
    arguments: dict[str, Any] = {"x-queue-type": "quorum"}
    if spec.ttlSeconds is not None:
        arguments["x-message-ttl"] = spec.ttlSeconds * 1000
    if spec.maxDeliveries is not None:
        arguments["x-delivery-limit"] = spec.maxDeliveries
    if spec.deadLetterAddress is not None:
        arguments["x-dead-letter-exchange"] = ""
        arguments["x-dead-letter-routing-key"] = layout.broker_name(tenant, spec.deadLetterAddress)
    return arguments


def _tenant_policy(layout: Layout, tenant: Tenant) -> dict[str, Any]:
    # At-least-once dead-lettering keeps a dead letter until the DLQ confirms it; it
    # needs reject-publish overflow, which also makes a full queue refuse, not drop.
    prefix = re.escape(layout.broker_name(tenant, ""))
    return {
        "name": f"{tenant.name}-queues",
        "vhost": layout.broker_vhost(tenant),
        "pattern": f"^{prefix}",
        "apply-to": "queues",
        "priority": 0,
        "definition": {"dead-letter-strategy": "at-least-once", "overflow": "reject-publish"},
    }


def _pattern_regex(patterns: list[str]) -> str:
    if not patterns:
        return "^$"
    parts = [re.escape(p[:-1]) + ".*" if p.endswith("*") else re.escape(p) for p in patterns]
    return "^(" + "|".join(parts) + ")$"


def _user_permissions(tenant: Tenant) -> list[dict[str, str]]:
    """Brokered spaces: clients reach RabbitMQ directly, so their rights become permissions.

    Publishing to a queue goes through the default exchange, hence `amq.default`.
    """
    permissions = []
    for user in tenant.users:
        sends = user.spec.patterns_for(Operation.SEND)
        permissions.append(
            {
                "user": f"{user.spec.username}@{tenant.name}",
                "vhost": tenant.name,
                "configure": r"^amq\.gen-.*",
                "write": _pattern_regex([*sends, "amq.default"] if sends else []),
                "read": _pattern_regex([*user.spec.patterns_for(Operation.RECV), "amq.gen-*"]),
            }
        )
    return permissions


# Address types the brokers store: their names are RabbitMQ queue or exchange names.
STORED_TYPES = (
    AddressType.QUEUE,
    AddressType.TOPIC,
    AddressType.SUBSCRIPTION,
    AddressType.DEADLETTER,
)


def check_broker_addresses(layout: Layout) -> None:
    """Raise CompileError for stored addresses RabbitMQ cannot be asked for over AMQP 1.0:
    its addresses (`/amq/queue/NAME`, `/exchange/NAME`) split on `/`, so a name with one
    is refused at attach time, and the broker then ends the router's whole session."""
    found = [
        f"{tenant.name}/{address.spec.address} ({address.spec.type})"
        for tenant in layout.model.tenants
        for address in tenant.addresses
        if address.spec.type in STORED_TYPES and "/" in address.spec.address
    ]
    if found:
        raise CompileError(
            "stored addresses cannot contain '/' (RabbitMQ's AMQP 1.0 addresses split on it; "
            "use '.' or '-', or a multicast or anycast address): " + ", ".join(found)
        )


def broker_definitions(layout: Layout, broker: str) -> Definitions:
    queues: list[dict[str, Any]] = []
    exchanges: list[dict[str, Any]] = []
    bindings: list[dict[str, Any]] = []
    policies: list[dict[str, Any]] = []
    parameters: list[dict[str, Any]] = []
    permissions: list[dict[str, str]] = []
    vhosts: set[str] = set()

    for tenant in layout.model.tenants:
        if broker not in layout.tenant_brokers(tenant):
            continue
        vhost = layout.broker_vhost(tenant)
        vhosts.add(vhost)
        policies.append(_tenant_policy(layout, tenant))
        if vhost != STANDARD_BROKER_VHOST:
            limits = tenant.plan.spec.resourceLimits
            parameters.append(
                {
                    "component": "vhost-limits",
                    "vhost": vhost,
                    "name": "limits",
                    "value": {
                        "max-connections": limits.connections,
                        "max-queues": limits.addresses,
                    },
                }
            )
            permissions += _user_permissions(tenant)
        for address in tenant.addresses:
            if broker not in layout.address_brokers(tenant, address) or address.spec.type.is_direct:
                continue
            name = layout.broker_name(tenant, address.spec.address)
            if address.spec.type is AddressType.TOPIC:
                exchanges.append(
                    {
                        "name": name,
                        "vhost": vhost,
                        "type": "fanout",
                        "durable": True,
                        "auto_delete": False,
                        "internal": False,
                        "arguments": {},
                    }
                )
                continue
            queues.append(
                {
                    "name": name,
                    "vhost": vhost,
                    "durable": True,
                    "auto_delete": False,
                    "arguments": _queue_arguments(layout, tenant, address),
                }
            )
            if address.spec.type is AddressType.SUBSCRIPTION:
                assert address.spec.topic is not None  # checked by the model
                bindings.append(
                    {
                        "source": layout.broker_name(tenant, address.spec.topic),
                        "vhost": vhost,
                        "destination": name,
                        "destination_type": "queue",
                        "routing_key": "",
                        "arguments": {},
                    }
                )
    # Each subscriber of a topic gets a server-named queue that RabbitMQ 3.x does not
    # delete with its link; expire it once unused instead of letting it collect alerts.
    policies += [
        {
            "name": "enmesh-temporary-queues",
            "vhost": vhost,
            "pattern": r"^amq\.gen-",
            "apply-to": "queues",
            "priority": 0,
            "definition": {"expires": TEMPORARY_QUEUE_TTL_MS},
        }
        for vhost in vhosts
    ]
    if STANDARD_BROKER_VHOST in vhosts:
        # The routers consume topics through server-named queues (`amq.gen-…`).
        permissions.append(
            {
                "user": ROUTER_BROKER_USER,
                "vhost": STANDARD_BROKER_VHOST,
                "configure": r"^amq\.gen-.*",
                "write": ".*",
                "read": ".*",
            }
        )

    def by(*keys: str) -> Any:
        return lambda item: tuple(str(item[k]) for k in keys)

    return {
        # Users are created at deploy time from their secrets: no password hash in here.
        "users": [],
        "vhosts": [{"name": v} for v in sorted(vhosts)],
        "permissions": sorted(permissions, key=by("vhost", "user")),
        "topic_permissions": [],
        "parameters": sorted(parameters, key=by("vhost", "component", "name")),
        "global_parameters": [],
        "policies": sorted(policies, key=by("vhost", "name")),
        "queues": sorted(queues, key=by("vhost", "name")),
        "exchanges": sorted(exchanges, key=by("vhost", "name")),
        "bindings": sorted(bindings, key=by("vhost", "source", "destination", "routing_key")),
    }


def _distribution(spec: StackBroker, node: BrokerNode) -> list[str]:
    """Erlang distribution: loopback for a lone broker, the pod network or the site
    network for a cluster."""
    lines = [
        f"distribution.listener.port_range.min = {spec.distPort}",
        f"distribution.listener.port_range.max = {spec.distPort}",
    ]
    cluster = [
        # A minority side stops serving rather than diverging; quorum queues need a majority.
        "cluster_partition_handling = pause_minority",
        "queue_leader_locator = balanced",
        # Until a silent node is declared down, a quorum queue whose leader was there holds
        # publishes through the others (Erlang's default is 60 s). RabbitMQ advises against
        # less than 5-10 s, where a busy network's pauses would split the cluster. The CLI
        # tools adopt the node's value when they connect.
        f"net_ticktime = {CLUSTER_NET_TICKTIME}",
    ]
    if is_cluster(spec):
        peers = [
            f"cluster_formation.classic_config.nodes.{peer.index + 1} = {peer.erlang_name}"
            for peer in broker_nodes(spec)
        ]
        return [
            f"distribution.listener.interface = {node.host}",
            *lines,
            "cluster_formation.peer_discovery_backend = classic_config",
            *peers,
            *cluster,
        ]
    discovery = spec.peerDiscovery
    if discovery is None:
        # The CLI tools and the node talk over Erlang distribution: never off this host.
        return ["distribution.listener.interface = 127.0.0.1", *lines]
    suffix = f".{discovery.service}.{discovery.namespace}.svc.{discovery.clusterDomain}"
    return [
        *lines,
        "cluster_formation.peer_discovery_backend = kubernetes",
        "cluster_formation.k8s.address_type = hostname",
        f"cluster_formation.k8s.service_name = {discovery.service}",
        f"cluster_formation.k8s.hostname_suffix = {suffix}",
        "cluster_formation.node_cleanup.only_log_warning = true",
        *cluster,
    ]


def inter_node_tls(layout: Layout, spec: StackBroker) -> str:
    """The Erlang distribution's TLS options of a cluster (`-ssl_dist_optfile`), on hosts
    or on Kubernetes: the nodes, and the CLI tools that join them, prove themselves with
    the broker's certificate from the stack's CA, both ways. No host name check: nodes
    are reached by address (or a pod's name) and any holder of the broker's key is a node
    (the cookie is checked too)."""
    component = layout.broker_tls_component(spec.name)
    tls_versions = ", ".join(f"'tlsv{v}'" for v in versions(layout.stack.spec.tls))
    common = [
        f'{{cacertfile, "{layout.ca_file}"}}',
        f'{{certfile, "{layout.tls_file(component, "crt")}"}}',
        f'{{keyfile, "{layout.tls_file(component, "key")}"}}',
        f"{{versions, [{tls_versions}]}}",
        "{verify, verify_peer}",
    ]
    server = ",\n    ".join([*common, "{fail_if_no_peer_cert, true}"])
    client = ",\n    ".join([*common, "{server_name_indication, disable}"])
    return (
        f"%% Erlang distribution over TLS between the nodes of {spec.name} in stack "
        f"{layout.stack.name!r}.\n%% Generated by `enmesh render`; do not edit by hand.\n"
        f"[{{server, [\n    {server}]}},\n {{client, [\n    {client}]}}].\n"
    )


def rabbitmq_conf(layout: Layout, node: BrokerNode) -> str:
    """rabbitmq.conf for one broker node: TLS only, AMQP 1.0 defaults, definitions at boot.

    The definitions grant permissions to `enmesh-router`, a user created at deploy time
    from its secret: create it, then import the definitions (at first boot RabbitMQ
    stops importing at the unknown user and loads only the vhosts).
    """
    broker = node.broker
    spec = layout.brokers[broker]
    component = layout.broker_tls_component(broker)
    listen = spec.listenHost or node.host
    what = f"node {node.erlang_name} of {broker}" if is_cluster(spec) else broker
    lines = [
        f"# RabbitMQ configuration of {what} in stack {layout.stack.name!r}.",
        "# Generated by `enmesh render`; do not edit by hand.",
        "listeners.tcp = none",
        f"listeners.ssl.default = {listen}:{spec.amqpsPort}",
        f"ssl_options.cacertfile = {layout.ca_file}",
        f"ssl_options.certfile = {layout.tls_file(component, 'crt')}",
        f"ssl_options.keyfile = {layout.tls_file(component, 'key')}",
        "ssl_options.verify = verify_none",
        "ssl_options.fail_if_no_peer_cert = false",
        *rabbitmq_ssl_lines(layout.stack.spec.tls),
        "loopback_users = none",
        "mqtt.listeners.tcp = none",
        f"mqtt.listeners.ssl.default = {listen}:{spec.mqttsPort}",
        "mqtt.allow_anonymous = false",
        f"mqtt.vhost = {STANDARD_BROKER_VHOST}",
        f"prometheus.tcp.ip = {listen}",
        f"prometheus.tcp.port = {spec.prometheusPort}",
        *_distribution(spec, node),
        # Connections that do not name a vhost (`vhost:<name>`) land in the routers' one.
        f"amqp1_0.default_vhost = {STANDARD_BROKER_VHOST}",
        "amqp1_0.default_user = none",
        # A router gone silent (its host frozen or cut off) holds the messages the broker
        # delivered to it until the broker drops its connection: RabbitMQ 3.10 does that
        # after about five heartbeat intervals of silence (measured on a site: 270 s at
        # the default 60, 24-26 s at 5). Routers then send a frame at least every 2.5 s.
        f"heartbeat = {HEARTBEAT_SECONDS}",
        f"load_definitions = {layout.config_path('brokers', f'{broker}.definitions.json')}",
    ]
    return "\n".join(lines) + "\n"
