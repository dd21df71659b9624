"""The Keycloak realm imported at boot: the model's users and their groups. One builder
for every target: the Kubernetes program (pulumi/enmesh_k8s/keycloak.py) and the tests
that import it into a real Keycloak (tests/auth).

As in EnMasse, a user's rights are group memberships: group `/<space>` per address space
with subgroups `send_<pattern>`, `recv_<pattern>` and `manage`. Passwords come from the
same Secrets the routers' SASL database is built from, so both agree.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from enmesh.auth.lookup import LOOKUP_CLIENT
from enmesh.compile.auth import link_addresses, sasl_identity
from enmesh.compile.identity import REALM
from enmesh.model import MessagingUser, Model, Operation, Tenant

# The client enmesh-auth checks passwords with (password grant) and whose access tokens
# carry the user's groups as full paths (`/<space>/send_<pattern>`).
AUTH_CLIENT = "enmesh-auth"
# The console's OIDC client: a browser logs in to Keycloak (authorization code flow with
# PKCE) and the console opens the user's management connections with the access token,
# which enmesh-auth has Keycloak introspect (enmesh.auth.bearer).
CONSOLE_CLIENT = "enmesh-console"
CONSOLE_CALLBACK_PATH = "/login/keycloak/callback"
# Access tokens live as long as the console keeps an idle session (enmesh.console.sessions)
# and are refreshed after that; a token is only ever sent to this stack's routers.
CONSOLE_TOKEN_SECONDS = 30 * 60
# The service account enmesh-auth reads users' state with (enmesh.auth.lookup): the
# realm-management role view-users and nothing else.
LOOKUP_ROLES = {"realm-management": ["view-users"]}
# What the model made, which `enmesh apply` changes and removes (enmesh.auth.sync); what
# was made in Keycloak by hand is left alone. Groups carry this attribute; users are
# members of the top-level group of the same name (Keycloak 26 drops user attributes its
# user profile does not declare). enmesh-auth reads only a space's own groups, so the
# marker grants nothing.
MANAGED = "enmesh-managed"
# Passwords hashed so that enmesh-auth can serve SCRAM-SHA-256: a pbkdf2-sha256 hash holds
# SCRAM's SaltedPassword (enmesh/deploy/keycloak_scram). Keycloak 26 hashes with argon2
# by default, from which no SCRAM key can be had; a password stored before this policy is
# hashed again at the user's next password (PLAIN) login. 27,500 iterations: Keycloak's
# pbkdf2-sha256 count before 24; every connecting client computes them for its SCRAM
# proof, and Keycloak's current default (600,000) would be 22 times that work.
HASH_ITERATIONS = 27_500
HASHING = ("hashAlgorithm(pbkdf2-sha256)", f"hashIterations({HASH_ITERATIONS})")
PASSWORD_POLICY = " and ".join(HASHING)


@dataclass(frozen=True)
class ConsoleClient:
    """The console's client in the realm: its secret and the console's base URL."""

    secret: str
    url: str  # https://host:port, where browsers reach the console

    @property
    def base(self) -> str:
        return self.url.rstrip("/")

    def attributes(self) -> dict[str, str]:
        return {
            "pkce.code.challenge.method": "S256",
            "post.logout.redirect.uris": self.base + "/login",
            "access.token.lifespan": str(CONSOLE_TOKEN_SECONDS),
        }

    def representation(self) -> dict[str, object]:
        return {
            "clientId": CONSOLE_CLIENT,
            "name": "enmesh console",
            "enabled": True,
            "publicClient": False,
            "clientAuthenticatorType": "client-secret",
            "secret": self.secret,
            "standardFlowEnabled": True,
            "directAccessGrantsEnabled": False,
            "implicitFlowEnabled": False,
            "serviceAccountsEnabled": False,
            "redirectUris": [self.base + CONSOLE_CALLBACK_PATH],
            "webOrigins": [],
            "attributes": self.attributes(),
            "protocolMappers": [_groups_mapper()],
        }


def with_scram_hashing(policy: str) -> str:
    """`policy` (Keycloak's "term(value) and term(value)" form) with its hashing terms
    replaced by ours; an operator's other terms (length, notUsername, ...) stay."""
    terms = [t.strip() for t in policy.split(" and ") if t.strip()]
    kept = [t for t in terms if not t.startswith(("hashAlgorithm(", "hashIterations("))]
    return " and ".join([*kept, *HASHING])


def user_representation(
    identity: str, space: str, groups: list[str], password: str
) -> dict[str, object]:
    """A messaging user as Keycloak's admin API and realm import take it."""
    return {
        "username": identity,
        "enabled": True,
        "credentials": [{"type": "password", "value": password, "temporary": False}],
        "groups": [f"/{MANAGED}", f"/{space}", *(f"/{space}/{g}" for g in groups)],
    }


def space_groups(model: Model) -> dict[str, set[str]]:
    """Space -> the subgroups its users' rights need (`send_<p>`, `recv_<p>`, `manage`)."""
    groups: dict[str, set[str]] = {tenant.name: set() for tenant in model.tenants}
    for tenant in model.tenants:
        for user in tenant.users:
            groups[tenant.name] |= set(user_groups(tenant, user))
    return groups


def user_groups(tenant: Tenant, user: MessagingUser) -> list[str]:
    """A user's subgroups of its space's group; patterns as link addresses, as the vhost
    policy has them (a subscription is received from as `topic::subscription`)."""
    names = [
        f"{op.value}_{pattern}"
        for op in (Operation.SEND, Operation.RECV)
        for pattern in link_addresses(tenant, user.spec.patterns_for(op))
    ]
    if any(Operation.MANAGE in rule.operations for rule in user.spec.authorization):
        names.append("manage")
    return sorted(names)


def realm_json(
    model: Model,
    passwords: Mapping[str, str],
    lookup_secret: str | None = None,
    console: ConsoleClient | None = None,
) -> str:
    """Realm export JSON; `passwords` maps a user's Secret name to its password.

    With `lookup_secret`, the realm also has the confidential client `enmesh-auth-lookup`
    (that secret) whose service account enmesh-auth remembers logins with; with `console`,
    the console's OIDC client.
    """
    groups = space_groups(model)
    users = []
    for tenant in model.tenants:
        for user in tenant.users:
            secret = user.spec.authentication.passwordSecret.name
            identity = sasl_identity(tenant, user)
            groups_of = user_groups(tenant, user)
            users.append(user_representation(identity, tenant.name, groups_of, passwords[secret]))
    realm = {
        "realm": REALM,
        "enabled": True,
        "sslRequired": "all",
        "passwordPolicy": PASSWORD_POLICY,
        "registrationAllowed": False,
        "groups": [
            {"name": MANAGED},
            *(
                {
                    "name": space,
                    "attributes": {MANAGED: ["true"]},
                    "subGroups": [
                        {"name": g, "attributes": {MANAGED: ["true"]}} for g in sorted(subgroups)
                    ],
                }
                for space, subgroups in sorted(groups.items())
            ),
        ],
        "clients": [
            _auth_client(),
            *([_lookup_client(lookup_secret)] if lookup_secret else []),
            *([console.representation()] if console else []),
        ],
        # Messaging users have no e-mail or names: Keycloak's profile check would hold
        # every login ("Account is not fully set up").
        "requiredActions": [
            {
                "alias": "VERIFY_PROFILE",
                "name": "Verify Profile",
                "providerId": "VERIFY_PROFILE",
                "enabled": False,
                "defaultAction": False,
                "priority": 90,
                "config": {},
            }
        ],
        "users": sorted(
            [*users, *([_lookup_account()] if lookup_secret else [])],
            key=lambda u: str(u["username"]),
        ),
    }
    return json.dumps(realm, indent=2, sort_keys=True) + "\n"


def _groups_mapper() -> dict[str, object]:
    """The user's groups as full paths (`/<space>/send_<pattern>`) in access tokens, and
    in Keycloak's answer when enmesh-auth introspects one."""
    return {
        "name": "groups",
        "protocol": "openid-connect",
        "protocolMapper": "oidc-group-membership-mapper",
        "config": {
            "claim.name": "groups",
            "full.path": "true",
            "access.token.claim": "true",
            "introspection.token.claim": "true",
            "id.token.claim": "false",
            "userinfo.token.claim": "false",
        },
    }


def _auth_client() -> dict[str, object]:
    return {
        "clientId": AUTH_CLIENT,
        "enabled": True,
        "publicClient": True,  # it holds no secret: a password grant proves the user only
        "directAccessGrantsEnabled": True,
        "standardFlowEnabled": False,
        "protocolMappers": [_groups_mapper()],
    }


def _lookup_client(secret: str) -> dict[str, object]:
    return {
        "clientId": LOOKUP_CLIENT,
        "enabled": True,
        "publicClient": False,
        "clientAuthenticatorType": "client-secret",
        "secret": secret,
        "serviceAccountsEnabled": True,
        "standardFlowEnabled": False,
        "directAccessGrantsEnabled": False,
    }


def _lookup_account() -> dict[str, object]:
    return {
        "username": f"service-account-{LOOKUP_CLIENT}",
        "enabled": True,
        "serviceAccountClientId": LOOKUP_CLIENT,
        "clientRoles": LOOKUP_ROLES,
    }
