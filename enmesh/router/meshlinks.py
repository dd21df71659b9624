"""The inter-router control plane: neighbours, advertisements, and links from other routers.

Each inter-router connection carries a control link each way (`_mesh/control`): a router
floods its advertisement (neighbours, the addresses it has consumers for, the link routes
it serves) and relays the newer ones it hears; the mesh recomputes paths from them. Data
arrives on transit links (`_mesh/<destination router>/<key>`), which are sources like any
producer's link.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from proton import Link, Message, Receiver, Sender

from enmesh.router.clientlinks import refuse
from enmesh.router.forwarding import set_address
from enmesh.router.inlinks import InLink
from enmesh.router.liveness import NeighbourWatch, keep_open_through_silence
from enmesh.router.mesh import RouterAdvertisement
from enmesh.router.routing import TRANSIT_PREFIX

if TYPE_CHECKING:
    from enmesh.router.connecting import ConnectionInfo
    from enmesh.router.engine import ProtonSocket
    from enmesh.router.router import Router

log = logging.getLogger("enmesh.router")

CONTROL_ADDRESS = "_mesh/control"
CONTROL_CREDIT = 1000


class MeshLinks:
    """This router's part of the mesh: what it tells its neighbours and hears from them."""

    def __init__(self, router: Router) -> None:
        self.router = router
        self._advertise_scheduled = False
        self.watch = NeighbourWatch(router)

    def attach(self, conn: ProtonSocket, info: ConnectionInfo, link: Link) -> None:
        """A link another router attached: control, transit, or part of a link route."""
        if self.router.link_routes.from_mesh(conn, info, link):
            return  # a link-routed attach on its way to (or from) a broker
        if not isinstance(link, Receiver):
            refuse(link, "amqp:not-allowed", "routers only send to each other")
            return
        target = link.remote_target.address or ""
        link.target.address = target
        set_address(link.source, link.remote_source.address)
        if target == CONTROL_ADDRESS:
            link.enmesh_control = True
            link.open()
            link.flow(CONTROL_CREDIT)
            return
        if not target.startswith(TRANSIT_PREFIX):
            refuse(link, "amqp:not-found", f"unknown inter-router address {target!r}")
            return
        destination, _, key = target[len(TRANSIT_PREFIX) :].partition("/")
        link.open()
        inbound = InLink(link, key, info.link_capacity, self.router.routing.route, destination)
        inbound.strip_in = False  # routers never strip each other's annotations
        self.router.routing.add_source(inbound)

    def neighbour_up(self, conn: ProtonSocket, info: ConnectionInfo, neighbour: str) -> None:
        if not neighbour or neighbour == self.router.id:
            conn.abort("amqp:invalid-field", "inter-router peer needs a distinct container id")
            return
        old = self.router.neighbours.get(neighbour)
        if old is not None and old is not conn and not old.closed:
            # The peer reconnected before we noticed the old connection die: the new one
            # is the live one. (Its close no longer removes the neighbour: see on_closed.)
            log.info("new inter-router connection from %s replaces the old one", neighbour)
            old.abort("amqp:connection:forced", "replaced by a newer connection")
        info.neighbour = neighbour
        self.router.neighbours[neighbour] = conn
        keep_open_through_silence(conn, info)
        self.watch.connected(neighbour, conn)
        control = self.router.session_of(conn).sender(f"control/{self.router.id}")
        control.target.address = CONTROL_ADDRESS
        control.snd_settle_mode = Link.SND_SETTLED
        control.enmesh_control_sender = True
        control.open()
        conn.context["control"] = control
        conn.context["outbox"] = list(self.router.mesh.advertisements.values())
        self.neighbours_changed()

    def neighbours_changed(self) -> None:
        live = [n for n, c in self.router.neighbours.items() if self.watch.live(n, c)]
        ra = self.router.mesh.update_local(neighbours=live)
        if ra is not None:
            self._flood(ra, exclude=None)
        self.router.routing.refresh_all()

    def advertise_soon(self) -> None:
        """What this router offers changed (e.g. a broker's link routes): tell the mesh."""
        if not self._advertise_scheduled:
            self._advertise_scheduled = True
            self.router.loop.call_soon(self._advertise)

    def _advertise(self) -> None:
        self._advertise_scheduled = False
        keys = [key for key, state in self.router.addresses.items() if state.consumers]
        ra = self.router.mesh.update_local(
            addresses=keys, link_routes=self.router.link_routes.available()
        )
        if ra is not None:
            self._flood(ra, exclude=None)
            self.router.routing.refresh_all()

    def _flood(self, ra: RouterAdvertisement, exclude: str | None) -> None:
        for neighbour, conn in self.router.neighbours.items():
            if neighbour != exclude and not conn.closed:
                outbox: list[RouterAdvertisement] = conn.context.setdefault("outbox", [])
                # Only the newest advertisement of a router matters: the outbox stays
                # bounded by the mesh size even while a neighbour withholds credit.
                outbox[:] = [old for old in outbox if old.router != ra.router]
                outbox.append(ra)
                self.send_control(conn)

    def send_control(self, conn: ProtonSocket) -> None:
        control: Sender | None = conn.context.get("control")
        outbox: list[RouterAdvertisement] = conn.context.get("outbox", [])
        if control is None:
            return
        while outbox and control.credit > 0:
            ra = outbox.pop(0)
            delivery = control.delivery(str(ra.sequence))
            control.send(Message(body=ra.to_body()).encode())
            control.advance()
            delivery.settle()

    def control_message(self, conn: ProtonSocket, link: Link, delivery: Any) -> None:
        if delivery.partial:
            return
        data = link.recv(delivery.pending)
        link.advance()
        delivery.settle()
        if link.credit < CONTROL_CREDIT // 2:
            link.flow(CONTROL_CREDIT - link.credit)
        try:
            message = Message()
            message.decode(data)
            ra = RouterAdvertisement.from_body(message.body)
        except Exception as exc:
            log.warning("bad control message from %s: %s", conn.peer, exc)
            return
        if self.router.mesh.accept(ra):
            info: ConnectionInfo = conn.context["info"]
            self._flood(ra, exclude=info.neighbour)
            self.router.routing.refresh_all()
