"""Which vhost policy, and which group of it, a client connection gets.

One decision for a connection being opened (`Connecting.admit_client`) and for the open
connections a changed policy re-examines (`reconfigure`), so both say the same thing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from enmesh.router.policy import Vhost, VhostGroup
from enmesh.router.saslrelay import Authenticated

# qdrouterd's policy `defaultVhost`: the policy of clients whose hostname names no vhost.
# enmesh stacks put their administrator there (docs/router.md "Live changes").
DEFAULT_VHOST = "$default"
UNKNOWN_GROUP = "$unknown"  # admitted by allowUnknownUser, with no rights at all
AUTHZ_GROUP = "$authz"  # the rights an auth service sent (authServicePlugin)


@dataclass(frozen=True)
class Admitted:
    vhost: Vhost
    group: VhostGroup


def authz_group(authz: Mapping[str, tuple[str, ...]]) -> VhostGroup:
    """What an auth service's `address-authz` grants, as qdrouterd applies it: those
    targets and sources, and anonymous senders and dynamic sources allowed."""
    return VhostGroup(
        name=AUTHZ_GROUP,
        sources=tuple(a for a, ops in authz.items() if "recv" in ops),
        targets=tuple(a for a, ops in authz.items() if "send" in ops),
        allow_anonymous_sender=True,
        allow_dynamic_source=True,
    )


def admit(
    vhosts: Mapping[str, Vhost],
    hostname: str,
    user: str,
    authenticated: Authenticated | None = None,
) -> Admitted | str:
    """The vhost and group for `user` naming `hostname`, or why the connection is refused.

    A user an auth service vouched for with permissions (`address-authz`) is not listed in
    any vhost policy: their identity `<user>@<space>` names the one space they may use,
    and the permissions replace the policy's group."""
    named = vhosts.get(hostname)
    vhost = named or vhosts.get(DEFAULT_VHOST)
    if vhost is None:
        return f"no address space {hostname!r} (set the AMQP hostname)"
    if authenticated is not None and authenticated.authz is not None:
        if user.rpartition("@")[2] != vhost.hostname and vhost.group_for(user) is None:
            return f"user {user!r} may not use address space {vhost.hostname!r}"
        return Admitted(vhost, authz_group(authenticated.authz))
    group = vhost.group_for(user)
    if group is None and not vhost.allow_unknown_user:
        if named is None:  # the default vhost serves only its members (the administrator)
            return f"no address space {hostname!r} (set the AMQP hostname)"
        return f"user {user!r} may not use address space {vhost.hostname!r}"
    return Admitted(vhost, group or VhostGroup(name=UNKNOWN_GROUP))


def is_administrator(vhost: Vhost | None, group: VhostGroup | None) -> bool:
    """May this connection change the router through management? The stack's
    administrator is a member of the default vhost whose group may update admin status
    and send to `$management`; tenants' users (any other vhost) never are."""
    return (
        vhost is not None
        and vhost.hostname == DEFAULT_VHOST
        and group is not None
        and group.allow_admin_status_update
        and "$management" in group.targets
    )
