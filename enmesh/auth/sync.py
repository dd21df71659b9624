"""Making Keycloak's realm hold the model's users and rights, through its admin API.

Users live in Keycloak only on a Keycloak stack (docs/identity.md), so a model change
reaches them here, as `enmesh apply` reaches the routers: a missing realm is imported
whole; otherwise each space's group and the subgroups its users' rights need are created,
each user of the model is created (with its password) or given exactly the subgroups its
rights name, a password is set again only when the caller says it changed, and users and
groups the model no longer has are removed. Only what enmesh made is changed or removed
(groups carry the `enmesh-managed` attribute, users are members of the group of that name):
users and groups made in Keycloak by hand stay.

Idempotent: a second run with the same model makes no call that changes anything.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Mapping, Set
from dataclasses import dataclass, field
from typing import Any, Protocol

from enmesh.auth.admin import KeycloakAdminError
from enmesh.auth.realm import (
    CONSOLE_CLIENT,
    MANAGED,
    ConsoleClient,
    realm_json,
    space_groups,
    user_groups,
    user_representation,
    with_scram_hashing,
)
from enmesh.compile.auth import sasl_identity
from enmesh.compile.identity import REALM
from enmesh.model import Model

NOT_FOUND = 404


class AdminApi(Protocol):
    def call(self, method: str, path: str, body: Any = None) -> Any: ...


@dataclass
class SyncResult:
    imported: bool = False  # the realm did not exist and was imported whole
    created: list[str] = field(default_factory=list)  # users and groups
    changed: list[str] = field(default_factory=list)  # users: groups or password
    removed: list[str] = field(default_factory=list)  # users and groups
    skipped: list[str] = field(default_factory=list)  # model users made in Keycloak by hand

    @property
    def unchanged(self) -> bool:
        return not (self.imported or self.created or self.changed or self.removed)


@dataclass(frozen=True)
class _Wanted:
    space: str
    groups: frozenset[str]  # subgroup names of the space's group
    password: str


# What enmesh sets on a client it aligns; anything else there is the operator's.
_CLIENT_FIELDS = ("secret", "redirectUris", "standardFlowEnabled", "publicClient")


@dataclass(frozen=True)
class RealmWanted:
    """What the realm should hold: the whole realm (imported where there is none), each
    space's subgroups, the users enmesh manages, and clients to align."""

    export: Mapping[str, Any]
    groups: Mapping[str, Set[str]]
    users: Mapping[str, _Wanted]
    clients: tuple[Mapping[str, Any], ...] = ()


def _managed(group: Mapping[str, Any]) -> bool:
    return "true" in group.get("attributes", {}).get(MANAGED, [])


def _q(text: str) -> str:
    return urllib.parse.quote(text, safe="")


class _Realm:
    def __init__(self, api: AdminApi, result: SyncResult) -> None:
        self.api, self.result = api, result
        self.base = f"/{REALM}"
        self.marker_id = ""  # the group whose members enmesh made (space_group_ids)

    def call(self, method: str, path: str, body: Any = None) -> Any:
        return self.api.call(method, self.base + path, body)

    # --- groups -----------------------------------------------------------------------
    def space_group_ids(self, wanted: Mapping[str, Set[str]]) -> dict[str, dict[str, str]]:
        """Space -> {subgroup name -> id}, after creating what is missing and removing
        subgroups (and managed spaces) the model no longer has."""
        existing = {g["name"]: g for g in self.call("GET", "/groups?briefRepresentation=false")}
        marker = existing.pop(MANAGED, None)
        if marker is None:
            self.call("POST", "/groups", {"name": MANAGED})
            marker = self.call("GET", f"/group-by-path/{_q(MANAGED)}")
        self.marker_id = str(marker["id"])
        ids: dict[str, dict[str, str]] = {}
        for space, subgroups in sorted(wanted.items()):
            group = existing.get(space)
            if group is None:
                body = {"name": space, "attributes": {MANAGED: ["true"]}}
                self.call("POST", "/groups", body)
                # by path: a search also matches subgroups of that name elsewhere
                group = self.call("GET", f"/group-by-path/{_q(space)}")
                self.result.created.append(f"/{space}")
            children = self.children(group["id"])
            missing = sorted(subgroups - children.keys())
            for name in missing:
                body = {"name": name, "attributes": {MANAGED: ["true"]}}
                self.call("POST", f"/groups/{group['id']}/children", body)
                self.result.created.append(f"/{space}/{name}")
            for name in sorted(children.keys() - subgroups):
                if _managed(children[name]):  # a subgroup made by hand stays
                    self.call("DELETE", f"/groups/{children.pop(name)['id']}")
                    self.result.removed.append(f"/{space}/{name}")
            if missing:  # their ids come from Keycloak
                children = self.children(group["id"])
            ids[space] = {"": group["id"], **{n: c["id"] for n, c in children.items()}}
        for space, group in sorted(existing.items()):
            if space not in wanted and _managed(group):
                self.call("DELETE", f"/groups/{group['id']}")
                self.result.removed.append(f"/{space}")
        return ids

    def children(self, group_id: str) -> dict[str, dict[str, Any]]:
        path = f"/groups/{group_id}/children?briefRepresentation=false&max=1000"
        return {c["name"]: c for c in self.call("GET", path)}

    # --- clients ----------------------------------------------------------------------
    def align_client(self, wanted: Mapping[str, Any]) -> None:
        """A client as `wanted` says: created, or its secret, redirects, flows and the
        attributes enmesh sets put back (other settings an operator made stay)."""
        client_id = str(wanted["clientId"])
        found = self.call("GET", f"/clients?clientId={_q(client_id)}")
        if not found:
            self.call("POST", "/clients", dict(wanted))
            self.result.created.append(f"client {client_id}")
            return
        client = found[0]
        attributes = {**client.get("attributes", {}), **wanted.get("attributes", {})}
        fields = [f for f in _CLIENT_FIELDS if f in wanted]
        if all(client.get(f) == wanted[f] for f in fields) and attributes == client.get(
            "attributes", {}
        ):
            return
        updated = {**client, **{f: wanted[f] for f in fields}, "attributes": attributes}
        self.call("PUT", f"/clients/{client['id']}", updated)
        self.result.changed.append(f"client {client_id}")

    # --- users ------------------------------------------------------------------------
    def user(self, identity: str) -> dict[str, Any] | None:
        query = f"/users?exact=true&briefRepresentation=false&username={_q(identity)}"
        # Keycloak keeps usernames in lower case and may match more than asked for.
        return next((u for u in self.call("GET", query) if u["username"] == identity), None)

    def create_user(self, identity: str, wanted: _Wanted) -> None:
        body = user_representation(identity, wanted.space, sorted(wanted.groups), wanted.password)
        self.call("POST", "/users", body)
        self.result.created.append(identity)

    def align_user(
        self, user: Mapping[str, Any], wanted: _Wanted, ids: Mapping[str, str], reset: bool
    ) -> None:
        """Exactly the wanted subgroups of its space, and the space's group itself (its
        key in `ids` and here is "")."""
        space = f"/{wanted.space}"
        current = {
            g["path"].removeprefix(space).removeprefix("/"): g["id"]
            for g in self.call("GET", f"/users/{user['id']}/groups?briefRepresentation=true")
            if g["path"] == space or g["path"].startswith(space + "/")
        }
        wanted_names = wanted.groups | {""}
        changed = reset
        for name in sorted(wanted_names - current.keys()):
            self.call("PUT", f"/users/{user['id']}/groups/{ids[name]}")
            changed = True
        for name in sorted(current.keys() - wanted_names):
            self.call("DELETE", f"/users/{user['id']}/groups/{current[name]}")
            changed = True
        if reset:
            credential = {"type": "password", "value": wanted.password, "temporary": False}
            self.call("PUT", f"/users/{user['id']}/reset-password", credential)
        if changed:
            self.result.changed.append(str(user["username"]))

    def managed_users(self) -> list[dict[str, Any]]:
        path = f"/groups/{self.marker_id}/members?briefRepresentation=true&max=100000"
        return list(self.call("GET", path))


def _wanted_users(model: Model, passwords: Mapping[str, str]) -> dict[str, _Wanted]:
    return {
        sasl_identity(tenant, user): _Wanted(
            tenant.name,
            frozenset(user_groups(tenant, user)),
            passwords[user.spec.authentication.passwordSecret.name],
        )
        for tenant in model.tenants
        for user in tenant.users
    }


def sync_realm(
    api: AdminApi,
    model: Model,
    passwords: Mapping[str, str],
    *,
    reset: Set[str] = frozenset(),
    lookup_secret: str | None = None,
    console: ConsoleClient | None = None,
) -> SyncResult:
    """Make the realm hold `model`'s users and rights. `passwords`: secret name ->
    password; `reset`: identities whose password changed since the last sync (a password
    is never read back from Keycloak, so the caller keeps that record)."""
    wanted = RealmWanted(
        json.loads(realm_json(model, passwords, lookup_secret, console)),
        space_groups(model),
        _wanted_users(model, passwords),
        (console.representation(),) if console else (),
    )
    return sync_wanted(api, wanted, reset)


def wanted_of_export(export: Mapping[str, Any]) -> RealmWanted:
    """What a realm export (as realm_json writes it) asks for: its managed groups and
    users, and the console's client if it has one."""
    groups = {
        str(g["name"]): {str(sub["name"]) for sub in g.get("subGroups", [])}
        for g in export.get("groups", [])
        if _managed(g)
    }
    users = {}
    for user in export.get("users", []):
        paths = [str(p) for p in user.get("groups", [])]
        if f"/{MANAGED}" not in paths:
            continue  # a service account, or one the export does not manage
        space = next(p.strip("/") for p in paths if p.count("/") == 1 and p != f"/{MANAGED}")
        subgroups = frozenset(p.rsplit("/", 1)[1] for p in paths if p.startswith(f"/{space}/"))
        password = str(user["credentials"][0]["value"])
        users[str(user["username"])] = _Wanted(space, subgroups, password)
    console = tuple(c for c in export.get("clients", []) if c.get("clientId") == CONSOLE_CLIENT)
    return RealmWanted(export, groups, users, console)


def sync_wanted(api: AdminApi, wanted: RealmWanted, reset: Set[str] = frozenset()) -> SyncResult:
    """Make the realm hold `wanted` (see sync_realm)."""
    result = SyncResult()
    try:
        current = api.call("GET", f"/{REALM}")
    except KeycloakAdminError as error:
        if error.status != NOT_FOUND:
            raise
        api.call("POST", "", dict(wanted.export))
        result.imported = True
        return result
    policy = with_scram_hashing(str(current.get("passwordPolicy") or ""))
    if current.get("passwordPolicy") != policy:  # a realm made before SCRAM, or changed since
        api.call("PUT", f"/{REALM}", {"passwordPolicy": policy})
        result.changed.append("realm password policy")
    realm = _Realm(api, result)
    for client in wanted.clients:
        realm.align_client(client)
    ids = realm.space_group_ids(wanted.groups)
    managed = {u["username"]: u for u in realm.managed_users()}
    for identity, want in sorted(wanted.users.items()):
        if identity in managed:
            realm.align_user(managed[identity], want, ids[want.space], identity in reset)
        elif realm.user(identity) is None:
            realm.create_user(identity, want)
        else:  # one made by hand of that name stays as it is, and the caller says so
            result.skipped.append(identity)
    for user in managed.values():
        if user["username"] not in wanted.users:
            realm.call("DELETE", f"/users/{user['id']}")
            result.removed.append(str(user["username"]))
    return result
