"""Model + layout -> one qdrouterd.conf per router (DESIGN.md, "Semantics" table)."""

from __future__ import annotations

from collections.abc import Iterator

from enmesh.compile import administrator, identity
from enmesh.compile.bridge import (
    INTER_ROUTER_TLS,
    bridge_entities,
    failover_endpoints,
    uses_peer_brokers,
)
from enmesh.compile.broker_nodes import BrokerNode, broker_nodes
from enmesh.compile.engines import EngineProfile, Feature, profile_of
from enmesh.compile.engines.check import config_problems, require_valid
from enmesh.compile.layout import (
    ROUTER_BROKER_SECRET,
    ROUTER_BROKER_USER,
    Layout,
    RouterInstance,
    router_address,
    subscription_link_address,
)
from enmesh.compile.qdrouterd import Entity, render_entities, render_header
from enmesh.compile.stack import Broker as StackBroker
from enmesh.compile.tls import router_ssl_attributes
from enmesh.model import Address, AddressType, Tenant

CLIENT_TLS = "client-tls"
BROKER_TLS = "broker-tls"
SASL_CONFIG_NAME = "qdrouterd"


def _profile(layout: Layout) -> EngineProfile:
    return profile_of(layout.stack.spec.routers.engine)


def _ssl_profiles(layout: Layout, router: RouterInstance) -> Iterator[Entity]:
    policy = router_ssl_attributes(layout.stack.spec.tls)
    for profile, component in (
        (CLIENT_TLS, f"router-{router.index}-client"),
        (INTER_ROUTER_TLS, f"router-{router.index}-inter-router"),
    ):
        yield Entity(
            "sslProfile",
            {
                "name": profile,
                "caCertFile": layout.ca_file,
                "certFile": layout.tls_file(component, "crt"),
                "privateKeyFile": layout.tls_file(component, "key"),
                **policy,
            },
        )
    yield Entity("sslProfile", {"name": BROKER_TLS, "caCertFile": layout.ca_file, **policy})


def _client_mechanisms(layout: Layout, tls: bool) -> tuple[list[str], bool]:
    """SASL mechanisms for client listeners and whether peers must authenticate.

    PLAIN only over TLS. ANONYMOUS is offered only if some space allows it; the vhost
    policy of every other space then refuses unknown users.
    """
    mechanisms = ["SCRAM-SHA-256", "PLAIN"] if tls else ["SCRAM-SHA-256"]
    anonymous = any(t.space.spec.authentication.allowAnonymous for t in layout.model.tenants)
    if anonymous:
        mechanisms.append("ANONYMOUS")
    return mechanisms, not anonymous


def _failover_urls(layout: Layout, router: RouterInstance, scheme: str) -> str | None:
    """Where this listener's clients may reconnect: a bridge's failover routers (a
    migration's target), else the stack's other routers; next ones first, so that the
    clients of a router that goes spread over the rest. None on Kubernetes (`listenHost`):
    clients come through a Service there, not to pods by name."""
    tls = scheme == "amqps"
    peers = failover_endpoints(layout.stack.spec.bridges)
    if peers:
        places = [(p.host, p.amqps if tls else p.amqp) for p in peers]
        start = router.index % len(places)
        places = places[start:] + places[:start]
    elif layout.stack.spec.routers.listenHost is None:
        routers = layout.routers
        others = routers[router.index + 1 :] + routers[: router.index]
        places = [(r.host, r.amqps_port if tls else r.amqp_port) for r in others]
    else:
        return None
    return ", ".join(f"{scheme}://{host}:{port}" for host, port in places) or None


def _listeners(layout: Layout, router: RouterInstance) -> Iterator[Entity]:
    capacity = layout.stack.spec.routers.linkCapacity
    handshake = layout.stack.spec.security.handshake.timeoutSeconds  # qdrouterd 1.19 has it
    host = layout.stack.spec.routers.listenHost or router.host
    for name, port, tls in (("amqp", router.amqp_port, False), ("amqps", router.amqps_port, True)):
        mechanisms, authenticate = _client_mechanisms(layout, tls)
        attributes: dict[str, object] = {
            "name": name,
            "host": host,
            "port": port,
            "role": "normal",
            "authenticatePeer": authenticate,
            "saslMechanisms": mechanisms,
            "linkCapacity": capacity,
            "initialHandshakeTimeoutSeconds": handshake,
        }
        if tls:
            attributes |= {"sslProfile": CLIENT_TLS, "requireSsl": True}
        attributes |= identity.listener_attributes(layout, tls)
        failover = _failover_urls(layout, router, "amqps" if tls else "amqp")
        if failover:
            attributes["failoverUrls"] = failover
        # An engine without it serves no address space (check.refuse_unserved).
        if _profile(layout).provides(Feature.MULTI_TENANT):
            attributes["multiTenant"] = True
        yield Entity("listener", attributes)  # type: ignore[arg-type]
    yield Entity(
        "listener",
        {
            "name": "inter-router",
            "host": host,
            "port": router.inter_router_port,
            "role": "inter-router",
            "sslProfile": INTER_ROUTER_TLS,
            "requireSsl": True,
            "authenticatePeer": True,
            "saslMechanisms": ["EXTERNAL"],
            "initialHandshakeTimeoutSeconds": handshake,
        },
    )
    yield Entity(
        "listener",
        {
            "name": "metrics",
            "host": host,
            "port": router.metrics_port,
            "role": "normal",
            "http": True,
            "metrics": True,
            "websockets": False,
            "authenticatePeer": False,
        },
    )


def _connectors(layout: Layout, router: RouterInstance) -> Iterator[Entity]:
    for peer in layout.peers_to_connect(router):
        yield Entity(
            "connector",
            {
                "name": peer.id,
                "host": peer.host,
                "port": peer.inter_router_port,
                "role": "inter-router",
                "sslProfile": INTER_ROUTER_TLS,
                "verifyHostname": True,
                "saslMechanisms": ["EXTERNAL"],
            },
        )
    bridges = layout.stack.spec.bridges
    yield from bridge_entities(
        bridges, (r.id for r in layout.routers), router_ssl_attributes(layout.stack.spec.tls)
    )
    # A stack whose stored addresses a bridged peer serves has no broker connections.
    for broker in [] if uses_peer_brokers(bridges) else layout.stack.spec.brokers:
        for node in broker_nodes(broker):
            yield _broker_connector(layout, broker, node)


def _broker_connector(layout: Layout, broker: StackBroker, node: BrokerNode) -> Entity:
    return Entity(
        "connector",
        {
            "name": node.connection,
            "host": node.host,
            "port": broker.amqpsPort,
            "role": "route-container",
            "sslProfile": BROKER_TLS,
            "verifyHostname": True,
            "saslMechanisms": ["PLAIN"],
            "saslUsername": ROUTER_BROKER_USER,
            # A reference, never the password: the router reads the file at start-up.
            "saslPassword": "file:" + layout.secret_path(ROUTER_BROKER_SECRET, "password"),
            "linkCapacity": layout.stack.spec.routers.linkCapacity,
        },
    )


def _broker_key(layout: Layout) -> str:
    """How address entities name their broker. A router that leaves its brokers to a
    bridged peer has no connector to name (a reference the router checks), so it names
    the broker's container instead, which no connection of its own will have: such
    entities stay idle and the mesh reaches the peer's brokers."""
    return "containerId" if uses_peer_brokers(layout.stack.spec.bridges) else "connection"


def _broker_connections(layout: Layout, tenant: Tenant, address: Address) -> list[str]:
    """The connections to the brokers holding a stored address: every node of a cluster."""
    return [
        connection
        for name in layout.address_brokers(tenant, address)
        for connection in layout.broker_connections[name]
    ]


def _address_entities(layout: Layout, tenant: Tenant, address: Address) -> Iterator[Entity]:
    kind = address.spec.type
    internal = router_address(tenant.name, address.spec.address)
    if kind is AddressType.ANYCAST:
        yield Entity("address", {"prefix": internal, "distribution": "balanced"})
    elif kind is AddressType.MULTICAST:
        yield Entity("address", {"prefix": internal, "distribution": "multicast"})
    elif kind in (AddressType.QUEUE, AddressType.DEADLETTER):
        yield Entity("address", {"prefix": internal, "distribution": "balanced", "waypoint": True})
        external = "/amq/queue/" + layout.broker_name(tenant, address.spec.address)
        # Dead letters arrive from the broker itself, so nothing is routed into them.
        directions = ("in",) if kind is AddressType.DEADLETTER else ("in", "out")
        for broker in _broker_connections(layout, tenant, address):
            for direction in directions:
                yield Entity(
                    "autoLink",
                    {
                        "address": internal,
                        "direction": direction,
                        _broker_key(layout): broker,
                        "externalAddress": external,
                        "phase": 1 if direction == "in" else 0,
                    },
                )
    elif kind is AddressType.TOPIC:
        # A fanout exchange: publishers send to it, and each subscriber link gets its own
        # broker link (RabbitMQ binds a temporary queue). No binding key is needed, which
        # matters: qdrouterd-format parsers cut attribute values at `#`. Publishers send
        # with a routing key all the same (the fanout ignores it): RabbitMQ 3.10 stores an
        # AMQP 1.0 message sent to `/exchange/X` without a subject with no routing key,
        # and then crashes the AMQP 0-9-1 channel that consumes it from a subscription's
        # queue (the Shovel of `enmesh migrate move-stored`).
        name = layout.broker_name(tenant, address.spec.address)
        exchange = "/exchange/" + name
        for broker in _broker_connections(layout, tenant, address):
            for direction, external in (("out", f"{exchange}/{name}"), ("in", exchange)):
                yield Entity(
                    "linkRoute",
                    {
                        "prefix": internal,
                        "direction": direction,
                        _broker_key(layout): broker,
                        "delExternalPrefix": internal,
                        "addExternalPrefix": external,
                    },
                )
    else:  # subscription: a durable queue bound to its topic, consumed through a link route
        linked = router_address(tenant.name, subscription_link_address(address))
        queue = "/amq/queue/" + layout.broker_name(tenant, address.spec.address)
        for broker in _broker_connections(layout, tenant, address):
            yield Entity(
                "linkRoute",
                {
                    "prefix": linked,
                    "direction": "in",
                    _broker_key(layout): broker,
                    "delExternalPrefix": linked,
                    "addExternalPrefix": queue,
                },
            )


def address_entities(layout: Layout) -> list[Entity]:
    """`address`, `linkRoute` and `autoLink` entities: the same on every router."""
    return [
        entity
        for tenant in layout.standard_tenants
        for address in tenant.addresses
        for entity in _address_entities(layout, tenant, address)
    ]


def instance_entities(layout: Layout, router: RouterInstance) -> list[Entity]:
    """Entities that differ per router: identity, TLS, listeners, connectors, policy."""
    entities = [
        Entity(
            "router",
            {
                "id": router.id,
                "mode": "interior",
                # Every engine reads saslConfigDir; skupper-router knows no saslConfigPath.
                "saslConfigDir": layout.config_path("auth", "sasl2"),
                "saslConfigName": SASL_CONFIG_NAME,
            },
        ),
        Entity(
            "policy",
            {
                "enableVhostPolicy": True,
                "policyDir": layout.config_path("auth", "policies"),
                "maxConnections": administrator.CONNECTIONS
                + sum(t.plan.spec.resourceLimits.connections for t in layout.standard_tenants),
            },
        ),
    ]
    entities += _ssl_profiles(layout, router)
    entities += identity.router_entities(layout)
    entities += _listeners(layout, router)
    entities += _connectors(layout, router)
    return entities


def render_routers(layout: Layout) -> dict[str, str]:
    """Router id -> its qdrouterd.conf. The shared address section is rendered once.

    Every entity is checked against the stack's engine profile first."""
    profile = _profile(layout)
    addresses = address_entities(layout)
    instances = {router.id: instance_entities(layout, router) for router in layout.routers}
    problems = config_problems(profile, addresses, "address section")
    for router_id, entities in instances.items():
        problems += config_problems(profile, entities, router_id)
    require_valid(problems, profile)
    shared = render_entities(addresses)
    configs = {}
    for router_id, entities in instances.items():
        header = render_header(
            f"Router {router_id} of stack {layout.stack.name!r}.\n"
            "Generated by `enmesh render` from the address model; do not edit by hand."
        )
        configs[router_id] = header + render_entities(entities) + shared
    return configs
