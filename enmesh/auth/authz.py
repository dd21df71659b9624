"""A user's Keycloak groups -> the `address-authz` qdrouterd's auth service protocol
carries (address pattern -> ["send"] / ["recv"]).

The realm (enmesh.auth.realm) gives each address space a group `/<space>` with subgroups
`send_<pattern>`, `recv_<pattern>` and `manage`, as EnMasse did. They grant what the
space's vhost policy grants (enmesh.compile.auth): `manage` adds `$management` both
ways, and whoever may send may also answer requests on dynamic reply addresses.
"""

from __future__ import annotations

from enmesh.compile.auth import DYNAMIC_REPLY_TARGETS, MANAGEMENT_ADDRESS

SEND, RECV = "send", "recv"


def space_of(identity: str) -> str | None:
    """enmesh's SASL identities are `<user>@<space>` (enmesh.compile.auth.sasl_identity)."""
    return identity.rsplit("@", 1)[1] if "@" in identity else None


def address_authz(identity: str, groups: tuple[str, ...]) -> dict[str, list[str]]:
    """Permissions per address pattern. A group path `/<space>/<name>` counts only for
    the identity's own space, so a user can never carry rights into another tenant."""
    space = space_of(identity)
    grants: dict[str, set[str]] = {}
    for path in groups:
        parts = path.strip("/").split("/")
        if len(parts) == 2 and space is not None and parts[0] != space:
            continue  # another tenant's group
        if len(parts) > 2:
            continue
        name = parts[-1]
        if name == "manage":
            grants.setdefault(MANAGEMENT_ADDRESS, set()).update((SEND, RECV))
        for prefix, operation in ((f"{SEND}_", SEND), (f"{RECV}_", RECV)):
            if name.startswith(prefix) and len(name) > len(prefix):
                grants.setdefault(name[len(prefix) :], set()).add(operation)
    if any(SEND in ops for ops in grants.values()):
        grants.setdefault(DYNAMIC_REPLY_TARGETS, set()).add(SEND)
    return {address: sorted(ops) for address, ops in sorted(grants.items())}
