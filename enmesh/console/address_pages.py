"""The console's page of one address: its settings, its consumers and producers (the
endpoint links on every router, with their clients), its messages stored and a small
chart of its last hour (the space's chart endpoint, `?address=`, drawn by the same
script)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from enmesh.console import views
from enmesh.console.sessions import Session
from enmesh.model import Address, Tenant

if TYPE_CHECKING:
    from enmesh.console.app import Console


@dataclass(frozen=True)
class AddressView:
    tenant: Tenant
    address: Address
    row: views.AddressRow
    links: list[dict[str, Any]]  # endpoint links, each with its `router` and `client`
    unread: list[str]  # routers that could not be read


class AddressPages:
    def __init__(self, console: Console) -> None:
        self.console = console

    def routes(self, space: str) -> list[Route]:
        """After `addresses/new` and `addresses/ADDR/delete`: an address may hold '/'."""
        page = self.console.authenticated(self.address)
        return [Route(f"{space}/addresses/{{address:path}}", page, methods=["GET"])]

    async def address(self, request: Request, session: Session) -> Response:
        space, name = request.path_params["space"], request.path_params["address"]
        seen = await run_in_threadpool(self.gather, session, space, name)
        return self.console.page(
            request,
            "address.html",
            session=session,
            tenant=seen.tenant,
            spec=seen.address.spec,
            row=seen.row,
            links=seen.links,
            unread=seen.unread,
            charts=self.console.settings.prometheus is not None,
        )

    def gather(self, session: Session, space: str, name: str) -> AddressView:
        console = self.console
        tenant = console.tenant_of(session, space)
        address = next((a for a in tenant.addresses if a.spec.address == name), None)
        if address is None:
            raise HTTPException(404, f"no address {name!r} in {space!r}")
        routers, rows = console.address_rows(session, tenant, [address])
        clients = {(v.router.id, str(c["identity"])): c for v in routers for c in v.connections}
        links = [
            {**link, "client": clients.get((link["router"], str(link.get("connectionId"))), {})}
            for link in views.endpoint_links(space, routers).get(name, [])
        ]
        unread = [f"{v.router.id}: {v.error}" for v in routers if v.error]
        return AddressView(tenant, address, rows[0], links, unread)
