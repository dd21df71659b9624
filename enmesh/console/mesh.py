"""The console as a client of the mesh: it checks a login by opening a SASL connection
with the user's own credentials, and reads connections and links through each router's
AMQP management (`$management`, qdrouterd 1.19's QUERY), as qdstat does.

Reads go out with the logged-in user's credentials, so a tenant's `manage` right, which
the router scopes to its own address space, decides what a tenant sees: the console does
not filter on its own what the router would have shown.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from proton import ConnectionException, Message, Timeout
from proton.reactor import Container
from proton.utils import BlockingConnection, ConnectionClosed

from enmesh.clients import connect_options

NODE_TYPE = "org.amqp.management"
CONSOLE_CONTAINER = "enmesh-console"  # the console's own connections say who they are


def is_client(connection: dict[str, Any]) -> bool:
    """A client's connection: not inter-router or to a broker, not the console's reads."""
    return connection.get("role") == "normal" and not str(connection.get("container")).startswith(
        CONSOLE_CONTAINER
    )


_correlation = itertools.count(1)
log = logging.getLogger(__name__)


class MeshError(Exception):
    """A router could not be reached or refused a request (said in words)."""


@dataclass(frozen=True)
class Credentials:
    identity: str  # `user@space`, or the stack administrator's identity
    password: str
    vhost: str  # AMQP open hostname: the address space (`localhost` for the administrator)
    administrator: bool = False  # the stack administrator (in the routers' own database)


@dataclass(frozen=True)
class Router:
    id: str
    url: str  # amqps://host:port
    # Where the administrator logs in when the amqps listener asks Keycloak (which does
    # not know it): the cleartext listener, SCRAM against the routers' own database.
    administrator_url: str | None = None


def _connect(router: Router, who: Credentials, ca: Path, timeout: float) -> BlockingConnection:
    url = (who.administrator and router.administrator_url) or router.url
    own_database = url != router.url
    options = connect_options(
        url,
        user=who.identity,
        password=who.password,
        vhost=who.vhost,
        ca=ca,
        # PLAIN over TLS only (amqps URL); a password never crosses cleartext.
        mechanisms="SCRAM-SHA-256" if own_database else "PLAIN",
    )
    del options["reconnect"]
    container = Container()
    container.container_id = f"{CONSOLE_CONTAINER}-{uuid.uuid4()}"
    return BlockingConnection(options.pop("url"), timeout=timeout, container=container, **options)


def check_login(routers: Sequence[Router], who: Credentials, ca: Path, timeout: float = 10) -> bool:
    """True if a router's SASL accepts these credentials for this address space. Routers
    are tried in turn: one that is down (or refuses TCP/TLS) must not stop logins, and
    every router has the same SASL database. A refusal by SASL itself is final."""
    for router in routers:
        try:
            connection = _connect(router, who, ca, timeout)
        except ConnectionException as exc:
            if _authentication_refused(exc):
                return False
            log.warning("login check: router %s unreachable: %s", router.id, exc)
            continue
        except Timeout as exc:
            log.warning("login check: router %s timed out: %s", router.id, exc)
            continue
        connection.close()
        return True
    return False


def _authentication_refused(exc: ConnectionException) -> bool:
    """The router answered and said no (SASL outcome, or it closed the opened connection),
    as opposed to not answering (TCP refused, TLS failed: `proton:io`)."""
    return isinstance(exc, ConnectionClosed) or "amqp:unauthorized-access" in str(exc)


class Management:
    """One management connection to one router: request, wait for the correlated reply."""

    def __init__(self, router: Router, who: Credentials, ca: Path, timeout: float = 10) -> None:
        self.router = router
        self.timeout = timeout
        try:
            self.connection = _connect(router, who, ca, timeout)
        except (ConnectionException, Timeout) as exc:
            raise MeshError(f"router {router.id} ({router.url}): {exc}") from exc
        try:
            self.replies = self.connection.create_receiver(None, dynamic=True)
            self.sender = self.connection.create_sender("$management")
        except (ConnectionException, Timeout) as exc:
            self.close()
            raise MeshError(f"router {router.id} ({router.url}): {exc}") from exc
        self.reply_to = self.replies.link.remote_source.address

    def __enter__(self) -> Management:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        with contextlib.suppress(ConnectionException, Timeout):
            self.connection.close()

    def call(self, body: Any, **properties: Any) -> tuple[int, str, Any]:
        request = Message(
            reply_to=self.reply_to,
            correlation_id=next(_correlation),
            properties=properties,
            body=body,
        )
        try:
            self.sender.send(request)
            while True:
                reply = self.replies.receive(timeout=self.timeout)  # sent settled
                if reply.correlation_id == request.correlation_id:
                    props: dict[str, Any] = reply.properties or {}
                    return int(props["statusCode"]), str(props["statusDescription"]), reply.body
        except (ConnectionException, Timeout) as exc:
            raise MeshError(f"router {self.router.id}: {exc}") from exc

    def query(self, entity_type: str, names: list[str]) -> list[dict[str, Any]]:
        status, description, body = self.call(
            {"attributeNames": names},
            operation="QUERY",
            type=NODE_TYPE,
            name="self",
            entityType=entity_type,
        )
        if status != 200:
            raise MeshError(f"router {self.router.id}: QUERY {entity_type}: {description}")
        columns = body["attributeNames"]
        return [dict(zip(columns, row, strict=True)) for row in body["results"]]

    def close_connection(self, identity: str) -> None:
        """qdrouterd's way: UPDATE the connection's adminStatus to `deleted`."""
        status, description, _ = self.call(
            {"adminStatus": "deleted"}, operation="UPDATE", type="connection", identity=identity
        )
        if status not in (200, 204):
            raise MeshError(f"router {self.router.id}: close connection {identity}: {description}")


T = TypeVar("T")


class ManagementLinks:
    """A session's management connections, one per router, kept open between pages:
    opening one (TCP, TLS, SASL, two links) is most of what a page costs. One request at a
    time per router."""

    def __init__(self, who: Credentials, ca: Path) -> None:
        self.who, self.ca = who, ca
        self._open: dict[str, Management] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def use(self, router: Router, action: Callable[[Management], T], *, read: bool = False) -> T:
        """Run `action` on this router's connection. A read that fails on a kept connection
        (router restarted, idle timeout) runs once more on a new one; a write never runs
        twice (it may have taken effect before the reply was lost). A connection whose
        action failed is closed, never kept."""
        with self._guard:
            lock = self._locks.setdefault(router.id, threading.Lock())
        with lock:
            management = self._open.pop(router.id, None)
            if management is not None and not read:
                return self._run(router, management, action)
            if management is not None:
                try:
                    return self._run(router, management, action)
                except MeshError:
                    pass  # stale: once more on a new connection
            return self._run(router, Management(router, self.who, self.ca), action)

    def _run(self, router: Router, management: Management, action: Callable[[Management], T]) -> T:
        try:
            result = action(management)
        except BaseException:
            management.close()
            raise
        self._open[router.id] = management
        return result

    def close(self) -> None:
        with self._guard:
            for management in self._open.values():
                management.close()
            self._open.clear()


CONNECTION_COLUMNS = [
    "identity",
    "host",
    "container",
    "role",
    "dir",
    "user",
    "tenant",
    "isEncrypted",
    "opened",
    "uptimeSeconds",
    "operStatus",
]
LINK_COLUMNS = [
    "identity",
    "linkName",
    "linkType",
    "linkDir",
    "owningAddr",
    "connectionId",
    "deliveryCount",
    "undeliveredCount",
    "unsettledCount",
    "acceptedCount",
    "operStatus",
]
