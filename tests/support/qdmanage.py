"""Management requests built as qdmanage builds them (qpid_dispatch.management.client.Node
in qpid-dispatch 1.19): the same properties in the same order, `None`s left out, an integer
correlation id counting from 1, the node's URL as `to`, and `{}` for a body not given.
qdmanage is in no package registry here, so the tests send its bytes with this client.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from proton import Message
from proton.utils import SyncRequestResponse

from enmesh.compile import administrator
from tests.support.amqp import Account
from tests.support.mesh import Mesh, build_mesh

NODE_TYPE = "org.amqp.management"


def _clean(properties: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in properties.items() if v is not None}  # client's clean_dict


@dataclass(frozen=True)
class Reply:
    status: int
    description: str
    body: Any


class _Client:
    """A blocking connection to a router, closed on leaving a `with` block."""

    def __init__(self, account: Account) -> None:
        self.connection = account.blocking()

    def close(self) -> None:
        self.connection.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _reply(response: Message) -> Reply:
    status: dict[str, Any] = response.properties or {}
    return Reply(int(status["statusCode"]), str(status["statusDescription"]), response.body)


class Qdmanage(_Client):
    """One connection to a router's `$management`, a reply receiver, requests in turn."""

    _correlation = itertools.count(1)

    def __init__(self, account: Account) -> None:
        super().__init__(account)
        self.url = account.url
        self.replies = self.connection.create_receiver(None, dynamic=True)
        self.reply_to = self.replies.link.remote_source.address
        self.sender = self.connection.create_sender("$management")

    def message(self, body: Any = None, **properties: Any) -> Message:
        """Node.request: address, reply_to, correlation_id, clean properties, body or {}."""
        return Message(
            address=f"{self.url}/$management",
            reply_to=self.reply_to,
            correlation_id=next(self._correlation),
            properties=_clean(properties),
            body=body or {},
        )

    def call(self, request: Message) -> Reply:
        self.sender.send(request)
        while True:
            response = self.replies.receive(timeout=15)  # the router sends replies settled
            if response.correlation_id == request.correlation_id:
                return _reply(response)

    # qdmanage's operations, as Node builds their requests
    def create(self, attributes: dict[str, Any], type: str, name: str | None = None) -> Reply:
        return self.call(self.message(attributes, operation="CREATE", type=type, name=name))

    def delete(self, type: str, name: str | None = None, identity: str | None = None) -> Reply:
        if name and identity:
            name = None
        return self.call(self.message(operation="DELETE", type=type, name=name, identity=identity))

    def update(
        self,
        attributes: dict[str, Any],
        type: str,
        name: str | None = None,
        identity: str | None = None,
    ) -> Reply:
        if name and identity:
            name = None
        request = self.message(
            attributes, operation="UPDATE", type=type, name=name, identity=identity
        )
        return self.call(request)

    def query(self, type: str, attribute_names: list[str] | None = None) -> Reply:
        request = self.message(
            {"attributeNames": attribute_names or []},
            name="self",
            type=NODE_TYPE,
            operation="QUERY",
            entityType=type,
            offset=None,
            count=None,
        )
        return self.call(request)


def rows(response: Reply) -> list[dict[str, Any]]:
    names = response.body["attributeNames"]
    return [dict(zip(names, row, strict=True)) for row in response.body["results"]]


ADMINISTRATOR = administrator.IDENTITY


@contextlib.contextmanager
def administered_router(
    directory: Path, prepare: Callable[[Mesh], None] | None = None
) -> Iterator[tuple[Mesh, Account]]:
    """One running router of the sample model and its stack administrator's account;
    `prepare` may change the compiled files before the router starts."""
    mesh = build_mesh(directory, routers=1)
    if prepare is not None:
        prepare(mesh)
    admin = add_administrator(mesh)
    try:
        mesh.start()
        yield mesh, admin
    finally:
        mesh.stop()


def add_administrator(mesh: Mesh) -> Account:
    """The stack administrator the compiler wrote (`_default.json`: the `$default` vhost,
    whose group may write management) and the test mesh put in its SASL database. The
    account names no address space (its AMQP hostname is `localhost`), so `$default`
    applies."""
    return Account(mesh.url(0), ADMINISTRATOR, mesh.passwords[ADMINISTRATOR], "localhost", mesh.ca)


class Qdstat(_Client):
    """qdstat's requests (tools/qdstat's BusManager over Node in qpid-dispatch 1.19): proton's
    SyncRequestResponse on `$management` (no `to`, string correlation ids "1", "2", ...);
    every request is to the node itself, properties `name`, `type`, `operation`, then its own.
    A QUERY pages as Node.query does: offset from 0, count min(limit or 500, 500)."""

    PAGE = 500  # Node.query's MAX_ALLOWED_COUNT_PER_REQUEST

    def __init__(self, account: Account) -> None:
        super().__init__(account)
        self.client = SyncRequestResponse(self.connection, "$management")

    def node_request(self, body: Any = None, **properties: Any) -> Reply:
        request = Message(
            properties=_clean({"name": "self", "type": NODE_TYPE, **properties}), body=body or {}
        )
        return _reply(self.client.call(request))

    def get_mgmt_nodes(self) -> Reply:
        return self.node_request(operation="GET-MGMT-NODES", entityType=None)

    def query(
        self, entity_type: str, attribute_names: list[str] | None = None, limit: int | None = None
    ) -> Reply:
        """All pages of a QUERY; the last reply's status, the pages' rows joined."""
        offset, count = 0, min(limit or self.PAGE, self.PAGE)
        names: list[str] = []
        results: list[list[Any]] = []
        while True:
            reply = self.node_request(
                {"attributeNames": attribute_names or []},
                operation="QUERY",
                entityType=entity_type,
                offset=offset,
                count=count,
            )
            if reply.status != 200:
                return reply
            names = names or list(reply.body["attributeNames"])
            results += reply.body["results"]
            if len(reply.body["results"]) < count or (limit and len(results) >= limit):
                break
            if limit and limit - len(results) < count:
                count = limit - len(results)
            offset += count
        body = {"attributeNames": names, "results": results}
        return Reply(reply.status, reply.description, body)
