"""AMQP management on `$management`: the request and reply links.

Requests follow the AMQP Management draft as Qpid Dispatch implements it: the operation
and entity type in application properties, the reply sent to `reply_to` with the
request's correlation id and `statusCode` / `statusDescription`. What each operation
answers is `management_ops`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from proton import Delivery, Link, Message

from enmesh.router import management_ops, management_writes, tenancy
from enmesh.router.forwarding import Held, set_address

if TYPE_CHECKING:
    from enmesh.router.connecting import ConnectionInfo
    from enmesh.router.engine import ProtonSocket
    from enmesh.router.reconfigure import LiveConfig
    from enmesh.router.router import Router

log = logging.getLogger("enmesh.router.management")
CREDIT = 100
HOLD = CREDIT  # replies held for one reply receiver that has not granted credit yet


class Management:
    def __init__(self, router: Router, live: LiveConfig | None = None) -> None:
        self.router = router
        self.live = live  # applies management writes; None: read-only

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
        if not request.reply_to:  # as qdrouterd: nobody to answer
            return
        tenant = info.vhost_name if info.multi_tenant and info.vhost_name else None
        status, description, body = self.handle(request, tenant, info)
        # qdrouterd answers with the request's correlation-id; the AMQP management draft
        # with its message-id when it has no correlation-id.
        correlation = request.correlation_id if request.correlation_id is not None else request.id
        reply = Message(
            body=body,
            correlation_id=correlation,
            address=request.reply_to,
            properties={"statusCode": status, "statusDescription": description},
        )
        self._send(info.internal(request.reply_to), reply)

    def handle(
        self, request: Message, tenant: str | None = None, info: ConnectionInfo | None = None
    ) -> tuple[int, str, Any]:
        properties: dict[str, Any] = dict(request.properties or {})
        if str(properties.get("operation", "")).upper() in management_writes.WRITE_OPERATIONS:
            return management_writes.answer(
                self.router,
                self.live,
                properties,
                request.body,
                may_write=self.may_write(info),
                who=info.user if info is not None and info.user else "anonymous",
            )
        return management_ops.answer(self.router, properties, request.body, tenant)

    def may_write(self, info: ConnectionInfo | None) -> bool:
        """Without vhost policy management is open, as qdrouterd's; with it, writes are
        the stack administrator's only."""
        if not self.router.policy_enabled:
            return True
        return info is not None and tenancy.is_administrator(info.vhost, info.group)

    def _send(self, internal_address: str, reply: Message) -> None:
        """Hand the reply to a consumer of its address. One without credit yet holds it
        until it grants some: a client may attach its reply receiver before it flows."""
        state = self.router.addresses.get(internal_address)
        consumers = state.consumers if state is not None else []
        ready = [out for out in consumers if out.free > 0]
        holding = [out for out in consumers if len(out.waiting) < HOLD]
        chosen = ready[0] if ready else min(holding, key=lambda out: len(out.waiting), default=None)
        if chosen is None:  # no consumer, or each holds HOLD replies already: memory is bounded
            log.info(
                "management reply to %s has no consumer that can take it; dropped",
                internal_address,
            )
            return
        chosen.offer(Held(reply.encode(), None, None))
