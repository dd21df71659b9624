"""A router as its stack administrator sees it through AMQP management (`$management`).

The administrator (`enmesh.compile.administrator`) logs in with SCRAM-SHA-256 on a
router's `amqp` port, naming the `$default` vhost as its AMQP hostname, and sends
qdrouterd's management QUERY (python-qpid-proton's `SyncRequestResponse`: a dynamic reply
receiver, one request at a time). `enmesh status` shows what each router serves;
`enmesh apply` checks that each reloaded router serves the addresses it compiled.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proton import Message
from proton.utils import BlockingConnection, SyncRequestResponse

from enmesh.clients import connect_options

TIMEOUT = 10.0
NODE_TYPE = "org.amqp.management"


class ManagementError(RuntimeError):
    """A login or request failed; the message says which router and why."""


@dataclass(frozen=True)
class Administrator:
    identity: str
    password: str = field(repr=False)
    vhost: str

    @staticmethod
    def of(deployment: Mapping[str, Any], secrets_dir: Path) -> Administrator | str:
        """The stack's administrator, or why there is none to log in as."""
        admin = deployment.get("administrator")
        if admin is None:
            return "deploy.json names no stack administrator (rendered before it existed)"
        path = secrets_dir / admin["secret"] / admin["key"]
        try:
            password = path.read_text(encoding="utf-8").rstrip("\r\n")
        except OSError as exc:
            return f"cannot read the administrator's secret {path} ({exc.strerror})"
        return Administrator(admin["identity"], password, admin["vhost"])


def router_url(router: Mapping[str, Any]) -> str:
    return f"amqp://{router['host']}:{router['ports']['amqp']}"


class Session:
    def __init__(self, url: str, client: SyncRequestResponse) -> None:
        self.url, self.client = url, client

    def query(self, entity_type: str, attributes: Sequence[str]) -> list[dict[str, Any]]:
        request = Message(
            properties={
                "operation": "QUERY",
                "type": NODE_TYPE,
                "name": "self",
                "entityType": entity_type,
            },
            body={"attributeNames": list(attributes)},
        )
        response = self.client.call(request)
        properties: dict[str, Any] = response.properties or {}
        status = int(properties.get("statusCode", 0))
        if status != 200:
            raise ManagementError(
                f"{self.url}: QUERY {entity_type} answered {status} "
                f"{properties.get('statusDescription', '')}"
            )
        body: Any = response.body
        names = body["attributeNames"]
        return [dict(zip(names, row, strict=True)) for row in body["results"]]


@contextmanager
def session(url: str, admin: Administrator, timeout: float = TIMEOUT) -> Iterator[Session]:
    options = connect_options(
        url,
        user=admin.identity,
        password=admin.password,
        vhost=admin.vhost,
        ca=None,
        mechanisms="SCRAM-SHA-256",
    )
    options.pop("reconnect")
    try:
        connection = BlockingConnection(timeout=timeout, **options)
    except Exception as exc:  # proton raises ConnectionException, LinkDetached, Timeout
        raise ManagementError(f"{url}: login as {admin.identity} failed: {exc}") from None
    try:
        try:
            client = SyncRequestResponse(connection, "$management")
        except Exception as exc:
            raise ManagementError(f"{url}: $management refused {admin.identity}: {exc}") from None
        yield Session(url, client)
    finally:
        connection.close()


@dataclass(frozen=True)
class Served:
    """What a router serves: its configured entities and its open connections."""

    addresses: frozenset[str]  # `prefix` or `pattern` of every `address` entity
    auto_links: int
    link_routes: int
    connections: int

    def line(self) -> str:
        return (
            f"{len(self.addresses)} addresses, {self.auto_links} autoLinks, "
            f"{self.link_routes} linkRoutes, {self.connections} connections"
        )


def served(url: str, admin: Administrator) -> Served:
    with session(url, admin) as node:
        addresses = node.query("address", ["prefix", "pattern"])
        return Served(
            frozenset(str(a["prefix"] or a["pattern"]) for a in addresses),
            len(node.query("autoLink", ["identity"])),
            len(node.query("linkRoute", ["identity"])),
            len(node.query("connection", ["identity"])),
        )


def confirm_addresses(url: str, admin: Administrator, expected: frozenset[str]) -> Served:
    """What the router at `url` serves, if its `address` entities are exactly `expected`."""
    found = served(url, admin)
    missing, extra = sorted(expected - found.addresses), sorted(found.addresses - expected)
    if missing or extra:
        raise ManagementError(
            f"{url} runs its new config but its management lists other addresses: "
            f"missing {missing[:5]}, not compiled {extra[:5]} (an address created or deleted "
            "through management by hand is overwritten by the next reload)"
        )
    return found
