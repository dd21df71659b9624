"""Follow a router's failover list from a python-qpid-proton client.

A router's open frame lists where its clients may reconnect (`failover-server-list`, as
qdrouterd sends it: enmesh.router.failover): the stack's other routers, or during a
migration the target stack's. Qpid JMS follows it by itself; python-qpid-proton does not,
so call `follow_failover_list(event.connection)` in `on_connection_opened` of a
connection made with `Container.connect(url, virtual_host=SPACE, reconnect=...)`
(reconnect on, its default; `virtual_host` given, or proton would send each listed
host's name as the AMQP hostname, which a multi-tenant listener reads as the address
space): when the connection drops, proton's reconnect then tries the listed places in
order and the URL it was connected to last, and follows the list the next router sends
in turn. The one just lost goes last because a host that lost power refuses nothing: a
connection to it waits for a SYN-ACK for about two minutes (Linux's SYN retries), and
proton-python has no connect timeout (Qpid JMS also moves on to the next URI).

proton-python keeps a connection's reconnect addresses on its private connector object
(`connection._overrides.address`, python-qpid-proton 0.37 to 0.40); this module is the one
place that touches it, and `tests/router/test_failover_list.py` checks it still works
with the pinned proton.
"""

from __future__ import annotations

from typing import Any

from proton import symbol
from proton._reactor import Urls  # not exported; the connector keeps one

PROPERTY = symbol("failover-server-list")
_PROTON_SCHEMES = ("amqp", "amqps")  # proton-python has no WebSocket transport


def failover_urls(connection: Any) -> list[str]:
    """The URLs the peer's open frame lists, in its order (AMQP and AMQPS ones)."""
    properties = connection.remote_properties or {}
    listed = properties.get(PROPERTY) or []
    current, _, _ = str(getattr(connection, "url", "")).rpartition("://")
    urls = []
    for entry in listed if isinstance(listed, list) else []:
        if not isinstance(entry, dict):
            continue
        host = entry.get(symbol("network-host"))
        port = entry.get(symbol("port")) or "5672"
        scheme = entry.get(symbol("scheme")) or current or "amqp"
        if host and scheme in _PROTON_SCHEMES:
            urls.append(f"{scheme}://{host}:{port}")
    return urls


def follow_failover_list(connection: Any) -> list[str]:
    """Make the peer's failover list this connection's reconnect addresses, the current
    one last; returns the listed URLs (empty: the addresses are left as they were)."""
    urls = failover_urls(connection)
    connector = getattr(connection, "_overrides", None)
    if not urls or connector is None or not hasattr(connector, "address"):
        return urls
    current = str(connection.url)
    connector.address = Urls([*(url for url in urls if url != current), current])
    return urls
