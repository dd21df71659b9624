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

from enmesh.auth.lookup import LOOKUP_CLIENT
from enmesh.compile.auth import sasl_identity
from enmesh.compile.identity import REALM
from enmesh.model import MessagingUser, Model, Operation

# The client enmesh-auth checks passwords with (password grant) and whose access tokens
# carry the user's groups as full paths (`/<space>/send_<pattern>`).
AUTH_CLIENT = "enmesh-auth"
# The service account enmesh-auth reads users' state with (enmesh.auth.lookup): the
# realm-management role view-users and nothing else.
LOOKUP_ROLES = {"realm-management": ["view-users"]}


def _permissions(model: Model) -> dict[str, set[str]]:
    groups: dict[str, set[str]] = {tenant.name: set() for tenant in model.tenants}
    for tenant in model.tenants:
        for user in tenant.users:
            groups[tenant.name] |= set(_user_groups(user))
    return groups


def _user_groups(user: MessagingUser) -> list[str]:
    names = [
        f"{op.value}_{pattern}"
        for op in (Operation.SEND, Operation.RECV)
        for pattern in user.spec.patterns_for(op)
    ]
    if any(Operation.MANAGE in rule.operations for rule in user.spec.authorization):
        names.append("manage")
    return sorted(names)


def realm_json(model: Model, passwords: Mapping[str, str], lookup_secret: str | None = None) -> str:
    """Realm export JSON; `passwords` maps a user's Secret name to its password.

    With `lookup_secret`, the realm also has the confidential client `enmesh-auth-lookup`
    (that secret) whose service account enmesh-auth remembers logins with.
    """
    groups = _permissions(model)
    users = []
    for tenant in model.tenants:
        for user in tenant.users:
            secret = user.spec.authentication.passwordSecret.name
            memberships = [f"/{tenant.name}/{g}" for g in _user_groups(user)]
            users.append(
                {
                    "username": sasl_identity(tenant, user),
                    "enabled": True,
                    "attributes": {"addressSpace": [tenant.name]},
                    "credentials": [
                        {"type": "password", "value": passwords[secret], "temporary": False}
                    ],
                    "groups": [f"/{tenant.name}", *memberships],
                }
            )
    realm = {
        "realm": REALM,
        "enabled": True,
        "sslRequired": "all",
        "registrationAllowed": False,
        "groups": [
            {"name": space, "subGroups": [{"name": g} for g in sorted(subgroups)]}
            for space, subgroups in sorted(groups.items())
        ],
        "clients": [_auth_client(), *([_lookup_client(lookup_secret)] if lookup_secret else [])],
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


def _auth_client() -> dict[str, object]:
    mapper = {
        "name": "groups",
        "protocol": "openid-connect",
        "protocolMapper": "oidc-group-membership-mapper",
        "config": {
            "claim.name": "groups",
            "full.path": "true",
            "access.token.claim": "true",
            "id.token.claim": "false",
            "userinfo.token.claim": "false",
        },
    }
    return {
        "clientId": AUTH_CLIENT,
        "enabled": True,
        "publicClient": True,  # it holds no secret: a password grant proves the user only
        "directAccessGrantsEnabled": True,
        "standardFlowEnabled": False,
        "protocolMappers": [mapper],
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
