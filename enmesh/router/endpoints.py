"""Letting go of proton links: nothing the router hangs on a link may outlive it.

proton keeps a wrapper's attributes in a dict owned by the C link (its record), so
`link.enmesh_out = OutLink(link, ...)` is a cycle through C that Python's collector
cannot see: without help the link, its deliveries and its session stay allocated for
as long as the connection lives, and after it (about 12 KB per pair of client links).
A link that both ends have closed is therefore stripped of the router's attributes and
freed, so the connection stops tracking it too.
"""

from __future__ import annotations

from proton import Endpoint, Link

ATTRIBUTE_PREFIX = "enmesh_"  # every attribute the router sets on a link starts with it
_CLOSED_BOTH_WAYS = int(Endpoint.LOCAL_CLOSED | Endpoint.REMOTE_CLOSED)
_FREED = "freed_by_router"  # no ATTRIBUTE_PREFIX: forget_attributes must keep it


def forget_attributes(link: Link) -> None:
    """Drop the router's objects from the link's record (proton's Wrapper `_attrs`)."""
    attrs: dict[str, object] | None = link.__dict__.get("_attrs")
    if attrs:
        for name in [name for name in attrs if name.startswith(ATTRIBUTE_PREFIX)]:
            del attrs[name]


def link_routed(link: Link) -> bool:
    """Has the link a partner across a link route (BrokerLinks: either side)?"""
    return any(getattr(link, name, None) is not None for name in ("enmesh_client", "enmesh_peer"))


def closed_both_ways(link: Link) -> bool:
    state = int(link.state)
    return state & _CLOSED_BOTH_WAYS == _CLOSED_BOTH_WAYS


def release(link: Link) -> None:
    """The link is over on both sides: let proton free it and everything hung on it.

    Idempotent. Both close events of a link can find it closed both ways: a link refused
    (closed here) while the peer's detach is already queued gets its remote-close event
    first and its local-close event after it. proton's pn_link_free must run only once:
    a second call adds the link to its session's freed list again, and freeing the session
    later frees the link twice (glibc "double free", or a corrupted heap and a SIGSEGV).
    """
    if getattr(link, _FREED, False):
        return
    forget_attributes(link)
    setattr(link, _FREED, True)  # lives in the link's record until proton finalizes it
    link.free()
