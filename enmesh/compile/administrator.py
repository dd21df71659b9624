"""The stack administrator: the one identity that may change routers through management.

qdrouterd gives a client whose AMQP hostname names no vhost the policy of its
`defaultVhost`, `$default`; the compiler writes that vhost with a single group whose
member may send to and receive from `$management` and close connections
(`allowAdminStatusUpdate`). enmesh-router lets only that group write management
(`enmesh.router.tenancy.is_administrator`); tenants' users, in their own vhosts, stay
read-only and scoped to their space.

The identity is reserved: its realm `enmesh.stack` has a dot, which no address space name
may have, so no `MessagingUser` can ever be it. Its password is a generated secret like
every user's (`<secrets>/enmesh-stack-admin/password` on hosts, a Secret on Kubernetes),
never in the model, the artefacts or a log.
"""

from __future__ import annotations

from typing import Any

from enmesh.compile.layout import Layout

IDENTITY = "admin@enmesh.stack"
SECRET = "enmesh-stack-admin"
KEY = "password"
DEFAULT_VHOST = "$default"  # qdrouterd's policy `defaultVhost`
# A space name cannot start with `_`, so this file never collides with `<space>.json`.
POLICY_FILE = "auth/policies/_default.json"
CONNECTIONS = 10  # counted on top of the tenants' limits, so a full stack still lets it in
MANAGEMENT = "$management"


def policy() -> list[Any]:
    return [
        [
            "vhost",
            {
                "hostname": DEFAULT_VHOST,
                "maxConnections": CONNECTIONS,
                "allowUnknownUser": False,
                "groups": {
                    "administrator": {
                        "users": IDENTITY,
                        "remoteHosts": "*",
                        "sources": MANAGEMENT,
                        "targets": MANAGEMENT,
                        "allowDynamicSource": True,  # management replies
                        "allowAdminStatusUpdate": True,
                    }
                },
            },
        ]
    ]


def deployment(layout: Layout) -> dict[str, str]:
    """`deploy.json`'s `administrator`: who, which secret, and the vhost to ask for."""
    return {
        "identity": IDENTITY,
        "secret": SECRET,
        "key": KEY,
        "path": layout.secret_path(SECRET, KEY),
        "vhost": DEFAULT_VHOST,
    }


def users_entry() -> dict[str, Any]:
    """`auth/users.json`'s `stackAdministrator`."""
    return {"identity": IDENTITY, "passwordSecret": {"key": KEY, "name": SECRET}}
