"""The stack's identity provider (`spec.identity`) in the routers' and deployers' terms.

With `provider: keycloak`, the routers' client TLS listener (amqps) hands each client's
SASL exchange to enmesh-auth (qdrouterd 1.19's `authServicePlugin`), which checks the
password against Keycloak and answers with the identity and the user's rights
(`address-authz`, from the user's groups). Messaging users then live in Keycloak only: they
are not in the routers' SASL database and the vhost policies name none of them (the rights
come with each connection). The cleartext listener (amqp) keeps the routers' own database,
which holds the stack's administrator alone: a password enmesh-auth checks (PLAIN, or
SCRAM-SHA-256 where Keycloak has enmesh's provider) never travels without TLS.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from enmesh.compile import console
from enmesh.compile.layout import Layout
from enmesh.compile.qdrouterd import Entity
from enmesh.compile.stack import IdentityProvider
from enmesh.compile.tls import router_ssl_attributes

AUTH_SERVICE = "enmesh-auth"  # the authServicePlugin's name, which listeners refer to
AUTH_SERVICE_TLS = "auth-service-tls"
AUTH_COMPONENT = "enmesh-auth"  # TLS file stem of enmesh-auth's certificate
KEYCLOAK_COMPONENT = "keycloak"
# Secrets of a Keycloak stack (`<secrets>/<name>/<key>`), generated like every password.
KEYCLOAK_ADMIN_SECRET = ("enmesh-keycloak-admin", "password")  # Keycloak's bootstrap admin
KEYCLOAK_DB_SECRET = ("enmesh-keycloak-db", "password")  # its PostgreSQL user `keycloak`
LOOKUP_SECRET = ("enmesh-auth-lookup", "password")  # the realm's enmesh-auth-lookup client
CONSOLE_SECRET = ("enmesh-console-oidc", "password")  # the realm's enmesh-console client
REALM = "enmesh"  # Keycloak's realm of the model (enmesh.auth.realm builds it)
# Each space's rights as a vhost policy naming its users: what the routers would hold
# without Keycloak, and what Keycloak's groups grant with it (enmesh.deploy.smoke).
RIGHTS_DIR = "auth/rights"
# What the routers let clients choose from; enmesh-auth offers SCRAM-SHA-256 only where
# enmesh's Keycloak provider serves the keys (the keycloak role's hosts), and the router
# offers what both lists have.
MECHANISMS = ["SCRAM-SHA-256", "PLAIN"]


def uses_keycloak(layout: Layout) -> bool:
    return layout.stack.spec.identity.provider is IdentityProvider.KEYCLOAK


def deployed_with_keycloak(deployment: Mapping[str, Any]) -> bool:
    """Whether a rendered `deploy.json` is a Keycloak stack's (one rendered before the
    `identity` section existed is not)."""
    return bool(deployment.get("identity", {}).get("provider") == IdentityProvider.KEYCLOAK)


def auth_service_host(layout: Layout) -> str:
    return layout.stack.spec.identity.authService.host or layout.routers[0].host


def keycloak_host(layout: Layout) -> str:
    return layout.stack.spec.identity.keycloak.host or auth_service_host(layout)


def keycloak_url(layout: Layout) -> str:
    return f"https://{keycloak_host(layout)}:{layout.stack.spec.identity.keycloak.port}"


def secrets(layout: Layout) -> list[tuple[str, str]]:
    """The (name, key) of every secret the identity provider needs."""
    if not uses_keycloak(layout):
        return []
    console_client = [CONSOLE_SECRET] if console.enabled(layout) else []
    return [KEYCLOAK_ADMIN_SECRET, KEYCLOAK_DB_SECRET, LOOKUP_SECRET, *console_client]


def router_entities(layout: Layout) -> list[Entity]:
    """The auth service a router's client TLS listener points at, and how it trusts it."""
    if not uses_keycloak(layout):
        return []
    return [
        Entity(
            "sslProfile",
            {
                "name": AUTH_SERVICE_TLS,
                "caCertFile": layout.ca_file,
                **router_ssl_attributes(layout.stack.spec.tls),
            },
        ),
        Entity(
            "authServicePlugin",
            {
                "name": AUTH_SERVICE,
                "host": auth_service_host(layout),
                "port": layout.stack.spec.identity.authService.port,
                "sslProfile": AUTH_SERVICE_TLS,
            },
        ),
    ]


def listener_attributes(layout: Layout, tls: bool) -> dict[str, object]:
    """What a client listener gets on top of the router's own SASL: the relay to
    enmesh-auth on the TLS listener of a Keycloak stack, nothing otherwise."""
    if not (tls and uses_keycloak(layout)):
        return {}
    return {"saslPlugin": AUTH_SERVICE, "saslMechanisms": MECHANISMS, "authenticatePeer": True}


def deployment(layout: Layout) -> dict[str, Any]:
    """`deploy.json`'s `identity`: which provider, and with Keycloak where enmesh-auth and
    Keycloak run, their ports and certificates (no secret values)."""
    provider = layout.stack.spec.identity.provider
    if provider is not IdentityProvider.KEYCLOAK:
        return {"provider": str(provider)}
    spec = layout.stack.spec.identity
    auth_host, keycloak = auth_service_host(layout), keycloak_host(layout)
    return {
        "provider": str(provider),
        "authService": {
            "host": auth_host,
            "port": spec.authService.port,
            "certificates": [layout.certificate(AUTH_COMPONENT, auth_host)],
        },
        "keycloak": {
            "host": keycloak,
            "port": spec.keycloak.port,
            "managementPort": spec.keycloak.managementPort,
            "databasePort": spec.keycloak.databasePort,
            "url": keycloak_url(layout),
            "realm": REALM,
            "certificates": [layout.certificate(KEYCLOAK_COMPONENT, keycloak)],
            "adminSecret": layout.secret_path(*KEYCLOAK_ADMIN_SECRET),
            "databaseSecret": layout.secret_path(*KEYCLOAK_DB_SECRET),
        },
        "lookupSecret": layout.secret_path(*LOOKUP_SECRET),
        # The console's OIDC client (its login to Keycloak; enmesh.console.oidc).
        **(
            {"consoleSecret": layout.secret_path(*CONSOLE_SECRET)}
            if console.enabled(layout)
            else {}
        ),
    }
