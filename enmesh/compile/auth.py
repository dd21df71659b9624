"""Model + layout -> authentication and authorization material.

- `auth/users.json`: who may log in (SASL identity `<username>@<space>`, the secret that
  holds the password); the SASL database is built from it at deploy time.
- `auth/sasl2/qdrouterd.conf`: Cyrus SASL configuration for the routers.
- `auth/policies/<space>.json`: one qdrouterd vhost policy per standard space: which
  users, and which addresses each may send to (targets) or receive from (sources).
"""

from __future__ import annotations

from typing import Any

from enmesh.compile import administrator
from enmesh.compile.layout import ROUTER_BROKER_SECRET, ROUTER_BROKER_USER, Layout
from enmesh.compile.layout import subscription_link_address as _subscription
from enmesh.model import AddressType, MessagingUser, Operation, Tenant

MANAGEMENT_ADDRESS = "$management"
# enmesh-router's temporary (dynamic) reply addresses: `_dynamic.<router>.<conn>.<random>`
# (enmesh.router.routing.DYNAMIC_PREFIX). A responder sends its reply there, named or
# through anonymous relay, and policy checks that target like any other.
DYNAMIC_REPLY_TARGETS = "_dynamic.*"


def sasl_identity(tenant: Tenant, user: MessagingUser) -> str:
    return f"{user.spec.username}@{tenant.name}"


def link_addresses(tenant: Tenant, patterns: list[str]) -> list[str]:
    """Authorization patterns as link addresses: a subscription is `topic::subscription`."""
    subscriptions = {
        a.spec.address: _subscription(a) for a in tenant.of_type(AddressType.SUBSCRIPTION)
    }
    return sorted({subscriptions.get(p, p) for p in patterns})


def _group(tenant: Tenant, user: MessagingUser) -> dict[str, Any]:
    manage = user.spec.may(Operation.MANAGE)
    extra = [MANAGEMENT_ADDRESS] if manage else []
    sends = user.spec.patterns_for(Operation.SEND)
    # Whoever may send may answer a request: the reply goes to the requester's dynamic
    # address, which no model pattern names. (Unguessable, as qdrouterd's temp.* are.)
    replies = [DYNAMIC_REPLY_TARGETS] if sends else []
    return {
        "users": sasl_identity(tenant, user),
        "remoteHosts": "*",
        "sources": ", ".join(
            link_addresses(tenant, user.spec.patterns_for(Operation.RECV)) + extra
        ),
        "targets": ", ".join(link_addresses(tenant, sends) + replies + extra),
        # Anonymous-relay senders (Qpid JMS's default): the router checks each message's
        # `to` against `targets`, so the link itself grants nothing more.
        "allowAnonymousSender": bool(sends),
        "allowDynamicSource": True,  # request/reply: temporary reply-to addresses
        "allowAdminStatusUpdate": manage,
    }


def vhost_policy(tenant: Tenant, listed_users: bool = True) -> list[Any]:
    """`listed_users` false (Keycloak): no user groups; each connection brings its rights."""
    groups = {u.spec.username: _group(tenant, u) for u in tenant.users} if listed_users else {}
    anonymous = tenant.space.spec.authentication.allowAnonymous
    if anonymous:
        groups["$default"] = {
            "remoteHosts": "*",
            "sources": "*",
            "targets": "*",
            "allowAnonymousSender": True,
            "allowDynamicSource": True,
        }
    return [
        [
            "vhost",
            {
                "hostname": tenant.name,
                "maxConnections": tenant.plan.spec.resourceLimits.connections,
                "allowUnknownUser": anonymous,
                "groups": dict(sorted(groups.items())),
            },
        ]
    ]


def users(layout: Layout) -> dict[str, Any]:
    messaging = [
        {
            "identity": sasl_identity(tenant, user),
            "username": user.spec.username,
            "realm": tenant.name,
            "addressSpace": tenant.name,
            "addressSpaceType": str(tenant.space.spec.type),
            "passwordSecret": user.spec.authentication.passwordSecret.model_dump(),
        }
        for tenant in layout.model.tenants
        for user in tenant.users
    ]
    return {
        "messagingUsers": sorted(messaging, key=lambda u: u["identity"]),
        "stackAdministrator": administrator.users_entry(),
        "brokerUsers": [
            {
                "name": ROUTER_BROKER_USER,
                "passwordSecret": {"name": ROUTER_BROKER_SECRET, "key": "password"},
            }
        ],
    }


def sasl_config(layout: Layout) -> str:
    mechanisms = ["EXTERNAL", "PLAIN", "SCRAM-SHA-256"]
    if any(t.space.spec.authentication.allowAnonymous for t in layout.model.tenants):
        mechanisms.append("ANONYMOUS")
    return (
        "# Cyrus SASL configuration for enmesh routers. Generated; do not edit.\n"
        "pwcheck_method: auxprop\n"
        "auxprop_plugin: sasldb\n"
        f"sasldb_path: {layout.sasldb_path}\n"
        f"mech_list: {' '.join(sorted(mechanisms))}\n"
    )
