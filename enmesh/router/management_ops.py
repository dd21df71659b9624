"""The operations of the management node, answered as qdrouterd 1.19's agent answers them.

`answer` takes a request's application properties and body and gives the reply's
statusCode, statusDescription and body. The node (`org.amqp.management`) answers QUERY,
GET-TYPES, GET-ATTRIBUTES, GET-OPERATIONS, GET-ANNOTATIONS and GET-MGMT-NODES; every
entity answers READ. Types and attribute names come from `management_schema`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from enmesh.router import inventory
from enmesh.router import management_schema as schema
from enmesh.router.management_schema import ManagedType

if TYPE_CHECKING:
    from enmesh.router.router import Router

OK, BAD_REQUEST, NOT_FOUND, NOT_IMPLEMENTED = 200, 400, 404, 501
SELF = {"identity": "self", "name": "self", "type": schema.TYPES["management"].name}


class ManagementError(Exception):
    def __init__(self, status: int, description: str) -> None:
        super().__init__(description)
        self.status, self.description = status, description


@dataclass(frozen=True)
class Request:
    router: Router
    properties: Mapping[str, Any]
    body: Any
    tenant: str | None  # a tenant's manage right covers its own address space only

    def requested_type(self, key: str = "entityType") -> ManagedType | None:
        name = self.properties.get(key)
        if not name:
            return None
        found = schema.find(str(name))
        if found is None:
            raise ManagementError(BAD_REQUEST, f"No such entity type '{name}'")
        return found

    def rows(self, wanted: ManagedType) -> list[dict[str, Any]]:
        if wanted.short == "management":
            return [dict(SELF)] if self.tenant is None else []
        return inventory.entities(self.router, wanted.name, self.tenant)


def answer(
    router: Router, properties: Mapping[str, Any], body: Any, tenant: str | None = None
) -> tuple[int, str, Any]:
    request = Request(router, properties, body, tenant)
    operation = properties.get("operation")
    try:
        if not operation:
            raise ManagementError(BAD_REQUEST, "No 'operation' in request properties")
        handler = _NODE_OPERATIONS.get(str(operation).upper())
        if handler is not None:
            status, reply = handler(request)
        elif str(operation).upper() == "READ":
            status, reply = _read(request)
        else:
            target = request.requested_type("type") or schema.TYPES[schema.NODE_TYPE]
            raise ManagementError(
                NOT_IMPLEMENTED,
                f"Operation '{operation}' not implemented for '{target.name}' "
                f"{target.operations()}",
            )
    except ManagementError as exc:
        return exc.status, exc.description, {}
    return status, "OK", reply


def _query_type(request: Request) -> ManagedType | None:
    """entityType names what to query; a `type` other than the node's is read the same."""
    wanted = request.requested_type()
    if wanted is None:
        named = request.requested_type("type")
        if named is not None and named.short not in (schema.NODE_TYPE, "management"):
            wanted = named
    return wanted


def _query(request: Request) -> tuple[int, Any]:
    wanted = _query_type(request)
    body = request.body if isinstance(request.body, Mapping) else {}
    names = [str(n) for n in body.get("attributeNames") or []]
    types = [wanted] if wanted is not None else schema.by_type(None)
    known = sorted({n for t in types for n in t.attributes()})
    if not names:
        names = wanted.columns() if wanted is not None else known
    elif wanted is None or not wanted.query_columns:  # qdrouterd's Python agent checks
        unknown = sorted(set(names) - set(known))
        if unknown:
            for_type = f" for type {wanted.name}" if wanted is not None else ""
            raise ManagementError(NOT_FOUND, f"Unknown attributes {unknown}{for_type}.")
    rows = [row for t in types for row in request.rows(t)]
    offset = int(request.properties.get("offset") or 0)
    count = request.properties.get("count")
    end = None if count is None or int(count) < 0 else offset + int(count)
    results = [[row.get(n) for n in names] for row in rows[offset:end]]
    return OK, {"attributeNames": names, "results": results}


def _read(request: Request) -> tuple[int, Any]:
    wanted = request.requested_type("type")
    ids = {k: request.properties[k] for k in ("identity", "name") if k in request.properties}
    if wanted is not None and wanted.short in (schema.NODE_TYPE, "management"):
        wanted = None
    if wanted is None:
        if not ids:  # the management node itself
            return OK, dict(SELF)
        candidates = [t for t in schema.TYPES.values() if t.short != schema.NODE_TYPE]
    elif not ids:
        singleton = request.rows(wanted)
        if len(singleton) == 1:  # the router: need not be named (qdrouterd wants a name)
            return OK, singleton[0]
        raise ManagementError(BAD_REQUEST, f"{wanted.name}: No name or identity provided")
    else:
        candidates = schema.by_type(wanted)
    found = [row for t in candidates for row in request.rows(t)]
    key, value = next(iter(ids.items()))
    matches = [row for row in found if row.get(key) == value]
    if not matches:
        described = " ".join(f"{k}={v}" for k, v in ids.items())
        raise ManagementError(NOT_FOUND, f"No entity with {described}")
    return OK, matches[0]


def _get_types(request: Request) -> tuple[int, Any]:
    return OK, {
        t.name: [b.name for b in t.bases()] for t in schema.by_type(request.requested_type())
    }


def _get_attributes(request: Request) -> tuple[int, Any]:
    wanted = request.requested_type()
    return OK, {t.name: t.attributes() for t in schema.TYPES.values() if wanted in (None, t)}


def _get_operations(request: Request) -> tuple[int, Any]:
    wanted = request.requested_type()
    return OK, {t.name: t.operations() for t in schema.TYPES.values() if wanted in (None, t)}


def _get_annotations(request: Request) -> tuple[int, Any]:
    return OK, {}  # qdrouterd defines none


def _get_mgmt_nodes(request: Request) -> tuple[int, Any]:
    """The other routers' management nodes (qdrouterd's topological addresses); their
    names only, so a tenant may see them too."""
    return OK, [f"amqp:/_topo/0/{node}/$management" for node in request.router.mesh.reachable()]


_NODE_OPERATIONS: Mapping[str, Callable[[Request], tuple[int, Any]]] = {
    "QUERY": _query,
    "GET-TYPES": _get_types,
    "GET-ATTRIBUTES": _get_attributes,
    "GET-OPERATIONS": _get_operations,
    "GET-ANNOTATIONS": _get_annotations,
    "GET-MGMT-NODES": _get_mgmt_nodes,
}
