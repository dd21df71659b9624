"""Which vhost policy, and which group of it, a client connection gets.

One decision for a connection being opened (`Connecting.admit_client`) and for the open
connections a changed policy re-examines (`reconfigure`), so both say the same thing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from enmesh.router.policy import Vhost, VhostGroup

# qdrouterd's policy `defaultVhost`: the policy of clients whose hostname names no vhost.
# enmesh stacks put their administrator there (docs/router.md "Live changes").
DEFAULT_VHOST = "$default"
UNKNOWN_GROUP = "$unknown"  # admitted by allowUnknownUser, with no rights at all


@dataclass(frozen=True)
class Admitted:
    vhost: Vhost
    group: VhostGroup


def admit(vhosts: Mapping[str, Vhost], hostname: str, user: str) -> Admitted | str:
    """The vhost and group for `user` naming `hostname`, or why the connection is refused."""
    named = vhosts.get(hostname)
    vhost = named or vhosts.get(DEFAULT_VHOST)
    if vhost is None:
        return f"no address space {hostname!r} (set the AMQP hostname)"
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
