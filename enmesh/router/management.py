"""AMQP management on `$management`: QUERY and READ of router, connection, link, address.

Requests follow the AMQP Management draft as Qpid Dispatch implements it: the operation
and entity type in application properties, the reply sent to `reply_to` with the
request's message id as correlation id and `statusCode` / `statusDescription`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from proton import Delivery, Link, Message

from enmesh.router import inventory
from enmesh.router.forwarding import Held, set_address

if TYPE_CHECKING:
    from enmesh.router.engine import ProtonSocket
    from enmesh.router.router import ConnectionInfo, Router

log = logging.getLogger("enmesh.router.management")
CREDIT = 100


class Management:
    def __init__(self, router: Router) -> None:
        self.router = router

    def attach_request_link(self, conn: ProtonSocket, info: ConnectionInfo, link: Link) -> None:
        set_address(link.target, link.remote_target.address)
        set_address(link.source, link.remote_source.address)
        link.enmesh_management = True
        link.open()
        link.flow(CREDIT)

    def attach_reply_link(self, conn: ProtonSocket, info: ConnectionInfo, link: Link) -> None:
        link.open()
        link.condition = None
        link.close()

    def on_request(self, conn: ProtonSocket, link: Link, delivery: Delivery) -> None:
        if delivery.partial:
            return
        data = link.recv(delivery.pending)
        link.advance()
        request = Message()
        try:
            request.decode(data)
        except Exception as exc:
            delivery.update(Delivery.REJECTED)
            delivery.settle()
            log.info("undecodable management request from %s: %s", conn.peer, exc)
            return
        delivery.update(Delivery.ACCEPTED)
        delivery.settle()
        if link.credit < CREDIT // 2:
            link.flow(CREDIT - link.credit)
        info: ConnectionInfo = conn.context["info"]
        tenant = info.vhost_name if info.multi_tenant and info.vhost_name else None
        status, description, body = self.handle(request, tenant)
        if request.reply_to:
            reply = Message(
                body=body,
                correlation_id=request.id if request.id is not None else request.correlation_id,
                address=request.reply_to,
                properties={"statusCode": status, "statusDescription": description},
            )
            self._send(info.internal(request.reply_to), reply)

    def handle(self, request: Message, tenant: str | None = None) -> tuple[int, str, Any]:
        properties: dict[str, Any] = dict(request.properties or {})
        operation = properties.get("operation")
        entity_type = properties.get("type") or properties.get("entityType")
        if operation not in ("QUERY", "READ"):
            return 501, f"operation {operation!r} is not implemented (QUERY, READ are)", None
        if entity_type not in inventory.TYPES:
            return 404, f"unknown entity type {entity_type!r}", None
        found = inventory.entities(self.router, entity_type, tenant)
        if operation == "READ":
            wanted = properties.get("identity") or properties.get("name")
            for entity in found:
                if wanted in (None, entity.get("identity"), entity.get("name")):
                    return 200, "OK", entity
            return 404, f"no {entity_type} with identity or name {wanted!r}", None
        body = request.body if isinstance(request.body, dict) else {}
        names = list(body.get("attributeNames") or [])
        if not names:
            names = sorted({key for entity in found for key in entity})
        return (
            200,
            "OK",
            {
                "attributeNames": names,
                "results": [[entity.get(name) for name in names] for entity in found],
            },
        )

    def _send(self, internal_address: str, reply: Message) -> None:
        state = self.router.addresses.get(internal_address)
        consumers = state.consumers if state is not None else []
        ready = [out for out in consumers if out.free > 0]
        if not ready:  # a reply nobody can take now is dropped, not queued without bound
            log.info(
                "management reply to %s has no consumer with credit; dropped", internal_address
            )
            return
        ready[0].offer(Held(reply.encode(), None, None))
