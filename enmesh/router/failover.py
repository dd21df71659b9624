"""A listener's `failoverUrls`: other places its clients may reconnect to, sent in the
open frame as qdrouterd 1.19 sends them.

`failoverUrls: amqps://10.0.0.2:5671, 10.0.0.3` is a comma-separated list of
`[(amqp|amqps|ws|wss)://]host[:port]`. The open frame's properties then carry
`failover-server-list`: a list of maps with `network-host`, `port` (a string, 5672 when
not given, as qdrouterd), and `scheme` where the URL names one. Clients that follow it
(Qpid JMS; `enmesh.client_failover.follow_failover_list` for python-qpid-proton) reconnect to
those places when the connection drops.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from proton import symbol

PROPERTY = symbol("failover-server-list")
NETWORK_HOST, PORT, SCHEME = symbol("network-host"), symbol("port"), symbol("scheme")
DEFAULT_PORT = "5672"
_URL = re.compile(
    r"^(?:(?P<scheme>amqps?|wss?)://)?(?P<host>\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]]+)(?::(?P<port>\d+))?$"
)


@dataclass(frozen=True)
class FailoverServer:
    scheme: str | None
    host: str
    port: str


def parse_failover_urls(text: str) -> tuple[FailoverServer, ...]:
    """ValueError naming the first entry that is not `[scheme://]host[:port]`."""
    servers = []
    for entry in (part.strip() for part in text.split(",")):
        found = _URL.match(entry)
        port = found["port"] if found else None
        if found is None or (port is not None and not 0 < int(port) < 65536):
            raise ValueError(
                f"{entry!r} is not a failover URL: expected [(amqp|amqps|ws|wss)://]host[:port]"
            )
        servers.append(FailoverServer(found["scheme"], found["host"], port or DEFAULT_PORT))
    return tuple(servers)


@functools.cache  # one per listener setting, not one per accepted connection
def open_properties(servers: tuple[FailoverServer, ...]) -> dict[Any, Any]:
    """The open frame's `properties` for a listener with these failover servers (shared:
    not to be changed)."""
    listed = []
    for server in servers:
        entry: dict[Any, Any] = {NETWORK_HOST: server.host, PORT: server.port}
        if server.scheme is not None:
            entry[SCHEME] = server.scheme
        listed.append(entry)
    return {PROPERTY: listed}
