"""`deploy.json`: what a deployer needs beyond the config files themselves.

Ansible roles (and `enmesh status`) read this instead of re-deriving the stack: which
router and broker runs on which host with which ports, the TLS certificates each needs
(file stem and the names it must carry) and every secret the stack references. It
holds names and paths only, never secret values.

Certificate names: proton checks a server certificate against the AMQP *virtual host*
a client asks for, so a client-facing router certificate names every address space;
and it matches a host given as an IP address only against DNS entries, so every
address is listed as a DNS name as well (the deployer adds the IP entry).
"""

from __future__ import annotations

from typing import Any

from enmesh.compile import administrator, console, identity, monitoring
from enmesh.compile.auth import sasl_identity
from enmesh.compile.broker_nodes import (
    CLUSTER_COOKIE_KEY,
    CLUSTER_COOKIE_SECRET,
    broker_nodes,
    inter_node_tls_file,
    is_cluster,
)
from enmesh.compile.layout import (
    ROUTER_BROKER_SECRET,
    ROUTER_BROKER_USER,
    Layout,
    subscription_link_address,
)
from enmesh.compile.stack import Broker
from enmesh.model import AddressType


def _routers(layout: Layout) -> list[dict[str, Any]]:
    spaces = [t.name for t in layout.standard_tenants]
    client_names = [*spaces, *layout.stack.spec.routers.clientDnsNames]
    return [
        {
            "id": r.id,
            "index": r.index,
            "host": r.host,
            "config": f"routers/{r.id}.conf",
            "ports": {
                "amqp": r.amqp_port,
                "amqps": r.amqps_port,
                "interRouter": r.inter_router_port,
                "metrics": r.metrics_port,
            },
            "certificates": [
                layout.certificate(f"router-{r.index}-client", r.host, *client_names),
                layout.certificate(f"router-{r.index}-inter-router", r.host, r.id),
            ],
        }
        for r in layout.routers
    ]


def _broker_nodes(spec: Broker) -> list[dict[str, str]]:
    return [{"host": n.host, "name": n.erlang_name, "config": n.config} for n in broker_nodes(spec)]


def _brokers(layout: Layout) -> list[dict[str, Any]]:
    return [
        {
            "name": b.name,
            "host": b.host,
            # Where its RabbitMQ nodes run; a cluster's share the cookie of `cookie`.
            "nodes": _broker_nodes(b),
            "cookie": (
                {"secret": CLUSTER_COOKIE_SECRET, "key": CLUSTER_COOKIE_KEY}
                if is_cluster(b)
                else None
            ),
            "interNodeTls": inter_node_tls_file(b) if is_cluster(b) else None,
            "definitions": f"brokers/{b.name}.definitions.json",
            "ports": {
                "amqps": b.amqpsPort,
                "mqtts": b.mqttsPort,
                "prometheus": b.prometheusPort,
                "dist": b.distPort,
            },
            "certificates": [
                layout.certificate(layout.broker_tls_component(b.name), b.host, *b.nodes)
            ],
            "users": [
                {"name": ROUTER_BROKER_USER, "secret": ROUTER_BROKER_SECRET, "key": "password"}
            ],
        }
        for b in layout.stack.spec.brokers
    ]


def _secrets(layout: Layout) -> list[dict[str, str]]:
    refs = {(ROUTER_BROKER_SECRET, "password"), (administrator.SECRET, administrator.KEY)}
    refs |= set(identity.secrets(layout))
    if any(is_cluster(b) for b in layout.stack.spec.brokers):
        refs.add((CLUSTER_COOKIE_SECRET, CLUSTER_COOKIE_KEY))
    for tenant in layout.model.tenants:
        for user in tenant.users:
            ref = user.spec.authentication.passwordSecret
            refs.add((ref.name, ref.key))
    return [
        {"name": name, "key": key, "path": layout.secret_path(name, key)}
        for name, key in sorted(refs)
    ]


def _users(layout: Layout) -> list[dict[str, str]]:
    return sorted(
        (
            {
                "identity": sasl_identity(tenant, user),
                "space": tenant.name,
                "secret": user.spec.authentication.passwordSecret.name,
            }
            for tenant in layout.standard_tenants
            for user in tenant.users
        ),
        key=lambda u: u["identity"],
    )


def _addresses(layout: Layout) -> list[dict[str, str]]:
    """Every address with the name clients attach to (`topic::sub` for a subscription)."""
    found = []
    for tenant in layout.model.tenants:
        for address in tenant.addresses:
            spec = address.spec
            entry = {"space": tenant.name, "address": spec.address, "type": str(spec.type)}
            entry["link"] = (
                subscription_link_address(address)
                if spec.type is AddressType.SUBSCRIPTION
                else spec.address
            )
            if spec.deadLetterAddress:
                entry["deadLetterAddress"] = spec.deadLetterAddress
            found.append(entry)
    return sorted(found, key=lambda a: (a["space"], a["address"]))


def _console(layout: Layout) -> dict[str, Any] | None:
    found: dict[str, Any] | None = console.settings(layout)
    if found is not None:
        found["certificates"] = [layout.certificate(console.COMPONENT, str(found["host"]))]
    return found


def deployment(layout: Layout) -> dict[str, Any]:
    paths = layout.stack.spec.paths
    return {
        "stack": layout.stack.name,
        "paths": {"config": paths.config, "state": paths.state, "secrets": paths.secrets},
        "ca": layout.ca_file,  # the CA's key stays with the deployer, never on a host
        "sasldb": layout.sasldb_path,
        "routers": _routers(layout),
        "brokers": _brokers(layout),
        "secrets": _secrets(layout),
        "users": _users(layout),
        "administrator": administrator.deployment(layout),
        "spaces": sorted(t.name for t in layout.model.tenants),
        "addresses": _addresses(layout),
        "monitoring": monitoring.deployment(layout),
        "mqtt": layout.stack.spec.mqtt.model_dump(),
        "console": _console(layout),
        "identity": identity.deployment(layout),
    }
