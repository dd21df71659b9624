"""The console's web application: Starlette routes rendering Jinja2 templates.

Every page needs a session; every POST needs the session's CSRF token (the login form,
before any session, a token bound to a short-lived cookie). Blocking work (AMQP, apply,
rabbitmqctl) runs in Starlette's thread pool so one slow router never stalls other pages.
"""

from __future__ import annotations

import hmac
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from enmesh.console import charts, views
from enmesh.console.address_pages import AddressPages
from enmesh.console.keycloak_pages import START_PATH, KeycloakPages
from enmesh.console.mesh import Credentials, ManagementLinks, MeshError, Router, check_login
from enmesh.console.oidc import OidcLogin, OidcSettings
from enmesh.console.pagination import PAGE_SIZE, Page
from enmesh.console.runtime import ADDRESS_FIELDS, GENERAL, ChangeError, Changes
from enmesh.console.sessions import COOKIE, Session, Sessions
from enmesh.console.user_pages import UserPages
from enmesh.control.target import Target
from enmesh.model import Address, Operation, Tenant

log = logging.getLogger("enmesh.console")
HERE = Path(__file__).parent
LOGIN_COOKIE = "enmesh_console_login"
ADMIN_VHOST = "localhost"  # the administrator names no address space: the default vhost
REFUSED = "wrong username or password"


@dataclass(frozen=True)
class Settings:
    stack_file: Path
    routers: tuple[Router, ...]
    ca: Path
    target: Callable[[], Target]
    administrator: str | None = None  # SASL identity of the stack administrator
    prometheus: str | None = None  # base URL of the stack's Prometheus, for the charts
    page_size: int = PAGE_SIZE  # addresses on a page of a space (the tests page with fewer)
    secure_cookies: bool = True
    # Queue -> messages stored (None: unknown); default: the target's brokers (rabbitmqctl).
    # On Kubernetes: Prometheus (enmesh.console.kubernetes), as there is no target.
    stored: Callable[[Tenant], dict[str, int] | None] | None = None
    # A Keycloak stack: users may log in through Keycloak (enmesh.console.oidc) too.
    oidc: OidcSettings | None = None


Handler = Callable[[Request, Session], Awaitable[Response]]


class Console:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.sessions = Sessions()
        self.changes = Changes(settings.stack_file, settings.target)
        self.templates = Jinja2Templates(directory=str(HERE / "templates"))
        self.templates.env.globals["stored_types"] = views.STORED  # None there: "unknown"
        self.keycloak = KeycloakPages(self, OidcLogin(settings.oidc)) if settings.oidc else None
        self.templates.env.globals["keycloak_login"] = START_PATH if self.keycloak else None

    # ------------------------------------------------------------------ plumbing
    def page(self, request: Request, name: str, status: int = 200, **context: Any) -> Response:
        session: Session | None = context.get("session")
        if session is not None:
            context["flash"], session.flash = session.flash, []
        return self.templates.TemplateResponse(request, name, context, status_code=status)

    def cookie(self, response: Response, name: str, value: str, max_age: int | None = None) -> None:
        response.set_cookie(
            name,
            value,
            max_age=max_age,
            secure=self.settings.secure_cookies,
            httponly=True,
            samesite="strict",
        )

    def authenticated(self, handler: Handler, *, post: bool = False) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            session = self.sessions.get(request.cookies.get(COOKIE))
            if post:
                token = (await request.form()).get("csrf")
                if session is None or not session.csrf_ok(
                    token if isinstance(token, str) else None
                ):
                    log.warning(
                        "refused %s %s: no session or bad CSRF token",
                        request.method,
                        request.url.path,
                    )
                    raise HTTPException(403, "refused: no valid session and CSRF token")
            if session is None:
                return RedirectResponse("/login", 303)
            space = request.path_params.get("space")
            if space is not None and not session.may_see(space):
                raise HTTPException(404, f"no address space {space!r}")
            return await handler(request, session)

        return endpoint

    def stored_messages(self, tenant: Tenant) -> dict[str, int] | None:
        """Queue -> messages stored, None when they cannot be known (see Settings.stored)."""
        if self.settings.stored is not None:
            return self.settings.stored(tenant)
        return views.stored_messages(self.settings.target(), tenant)

    def address_rows(
        self, session: Session, tenant: Tenant, shown: list[Address]
    ) -> tuple[list[views.RouterView], list[views.AddressRow]]:
        """The routers as `session` reads them, and the rows of the `shown` addresses (a
        page, or one): the brokers are asked only when one of them is stored."""
        routers = views.read_routers(self.settings.routers, self.links(session))
        stored_shown = any(views.is_stored(a) for a in shown)
        stored = (self.stored_messages(tenant) or {}) if stored_shown else {}
        added = self.changes.source().added_names()
        rates = self.rates_now(tenant.name)
        return routers, views.address_rows(tenant, added, routers, stored, rates, addresses=shown)

    def links(self, session: Session) -> ManagementLinks:
        return session.management(self.settings.ca)

    def tenant_of(self, session: Session, space: str) -> Tenant:
        model = self.changes.source().model()
        for tenant in views.visible_tenants(model, session.space):
            if tenant.name == space:
                return tenant
        raise HTTPException(404, f"no address space {space!r}")

    # ------------------------------------------------------------------ login
    async def login_form(self, request: Request, error: str = "", status: int = 200) -> Response:
        token = secrets.token_urlsafe(32)
        response = self.page(request, "login.html", status, csrf=token, error=error)
        self.cookie(response, LOGIN_COOKIE, token, max_age=600)
        return response

    async def login_page(self, request: Request) -> Response:
        return await self.login_form(request)

    async def login(self, request: Request) -> Response:
        form = await request.form()
        token, expected = str(form.get("csrf", "")), request.cookies.get(LOGIN_COOKIE, "")
        if not expected or not hmac.compare_digest(token, expected):
            raise HTTPException(403, "refused: the login form's CSRF token does not match")
        username, password = str(form.get("username", "")).strip(), str(form.get("password", ""))
        session, error = await run_in_threadpool(self.authenticate, username, password)
        if session is None:
            log.info("login refused for %r: %s", username, error)
            return await self.login_form(request, error, 401)
        log.info("login: %s", username)
        response = RedirectResponse("/", 303)
        self.cookie(response, COOKIE, self.sessions.create(session))
        response.delete_cookie(LOGIN_COOKIE)
        return response

    def authenticate(self, username: str, password: str) -> tuple[Session | None, str]:
        """The mesh checks the password (a SASL connection with it); the model says whether
        the user may manage its space."""
        if not username or not password:
            return None, REFUSED
        administrator = username == self.settings.administrator
        space = None if administrator else username.rpartition("@")[2]
        if space == "":
            return None, "give your username as user@address-space"
        who = Credentials(username, password, space or ADMIN_VHOST, administrator)
        if not check_login(self.settings.routers, who, self.settings.ca):
            return None, REFUSED
        if space is not None and not self.may_manage(username, space):
            return None, f"{username} has no `manage` right: the console is for managers"
        return Session(who, space), ""

    def may_manage(self, identity: str, space: str) -> bool:
        model = self.changes.source().model()
        tenant = next((t for t in model.tenants if t.name == space), None)
        user = identity.rpartition("@")[0]
        return tenant is not None and any(
            u.spec.username == user and u.spec.may(Operation.MANAGE) for u in tenant.users
        )

    async def logout(self, request: Request, session: Session) -> Response:
        self.sessions.drop(request.cookies.get(COOKIE))
        if self.keycloak is not None:
            await self.keycloak.logout(session)
        response = RedirectResponse("/login", 303)
        response.delete_cookie(COOKIE)
        return response

    # ------------------------------------------------------------------ pages
    async def home(self, request: Request, session: Session) -> Response:
        return RedirectResponse(
            "/spaces" if session.administrator else f"/spaces/{session.space}", 303
        )

    async def spaces(self, request: Request, session: Session) -> Response:
        def gather() -> tuple[list[Tenant], dict[str, int]]:
            model = self.changes.source().model()
            routers = views.read_routers(self.settings.routers, self.links(session))
            counts: dict[str, int] = {}
            for view in views.client_connections(routers, session.space):
                for connection in view.connections:
                    tenant = str(connection.get("tenant"))
                    counts[tenant] = counts.get(tenant, 0) + 1
            return views.visible_tenants(model, session.space), counts

        tenants, connections = await run_in_threadpool(gather)
        return self.page(
            request, "spaces.html", session=session, tenants=tenants, connections=connections
        )

    async def space(self, request: Request, session: Session) -> Response:
        space = request.path_params["space"]

        query = request.query_params.get("q", "").strip()

        def gather() -> tuple[Tenant, Page, list[views.AddressRow]]:
            """Only the shown page's addresses are looked up (no broker read for a page
            without a stored address)."""
            tenant = self.tenant_of(session, space)
            matching = [a for a in tenant.addresses if query in a.spec.address]
            page = Page.of(request.query_params.get("page"), len(matching), self.settings.page_size)
            _, rows = self.address_rows(session, tenant, page.items(matching))
            return tenant, page, rows

        tenant, page, rows = await run_in_threadpool(gather)
        return self.page(
            request,
            "space.html",
            session=session,
            tenant=tenant,
            rows=rows,
            pager=page,
            total=len(tenant.addresses),
            query=query,
            charts=self.settings.prometheus is not None,
        )

    def rates_now(self, space: str) -> dict[str, tuple[float, float]] | None:
        if self.settings.prometheus is None:
            return None
        try:
            return charts.address_rates(self.settings.prometheus, space)
        except charts.PrometheusError as exc:
            log.warning("%s", exc)
            return None

    async def rates(self, request: Request, session: Session) -> Response:
        """The space's chart data, or one address's (`?address=`, an address of the space)."""
        space, address = request.path_params["space"], request.query_params.get("address")
        tenant = await run_in_threadpool(self.tenant_of, session, space)
        if address is not None and address not in {a.spec.address for a in tenant.addresses}:
            return JSONResponse({"error": f"no address {address!r} in {space!r}"}, 404)
        if self.settings.prometheus is None:
            return JSONResponse({"error": "this stack's console has no Prometheus"}, 404)
        try:
            data = await run_in_threadpool(
                charts.space_rates, self.settings.prometheus, space, address=address
            )
        except charts.PrometheusError as exc:
            return JSONResponse({"error": str(exc)}, 502)
        return JSONResponse(data)

    def form_page(
        self,
        request: Request,
        template: str,
        session: Session,
        tenant: Tenant,
        *,
        values: dict[str, Any],
        errors: dict[str, list[str]],
        **context: Any,
    ) -> Response:
        """A form, again with the messages next to their fields (400 when there are some)."""
        return self.page(
            request,
            template,
            400 if errors else 200,
            session=session,
            tenant=tenant,
            values=values,
            errors=errors,
            general=errors.get(GENERAL, []),
            **context,
        )

    async def new_address(self, request: Request, session: Session) -> Response:
        tenant = await run_in_threadpool(self.tenant_of, session, request.path_params["space"])
        return self.form_page(request, "address_new.html", session, tenant, values={}, errors={})

    async def create_address(self, request: Request, session: Session) -> Response:
        space = request.path_params["space"]
        form = await request.form()
        values = {name: str(form.get(name, "")) for name in ADDRESS_FIELDS}
        tenant = await run_in_threadpool(self.tenant_of, session, space)
        try:
            errors = await run_in_threadpool(self.changes.create_address, space, values)
        except ChangeError as exc:
            errors = {GENERAL: [str(exc)]}
        if errors:
            return self.form_page(
                request, "address_new.html", session, tenant, values=values, errors=errors
            )
        session.flash.append(f"address {values['address']} created")
        return RedirectResponse(f"/spaces/{space}", 303)

    async def confirm_delete(self, request: Request, session: Session) -> Response:
        space, address = request.path_params["space"], request.path_params["address"]

        def gather() -> tuple[Tenant, int | None]:
            tenant = self.tenant_of(session, space)
            stored = self.stored_messages(tenant)
            return tenant, None if stored is None else views.stored_count(stored, tenant, address)

        tenant, stored = await run_in_threadpool(gather)
        return self.page(
            request,
            "address_delete.html",
            session=session,
            tenant=tenant,
            address=address,
            stored=stored,
        )

    async def delete_address(self, request: Request, session: Session) -> Response:
        space = request.path_params["space"]
        return await self.confirmed_delete(
            request, session, "address", f"/spaces/{space}", self.changes.delete_address
        )

    async def confirmed_delete(
        self,
        request: Request,
        session: Session,
        param: str,
        listing: str,
        delete: Callable[[str, str], None],
    ) -> Response:
        """Delete once the user typed the name (else back to the confirmation page)."""
        space, name = request.path_params["space"], request.path_params[param]
        what = "user" if param == "username" else param
        form = await request.form()
        if form.get("confirm") != name:
            session.flash.append(f"not deleted: type {name!r} to confirm")
            return RedirectResponse(request.url.path, 303)
        try:
            await run_in_threadpool(delete, space, name)
            session.flash.append(f"{what} {name} deleted")
        except ChangeError as exc:
            session.flash.append(str(exc))
        return RedirectResponse(listing, 303)

    async def connections(self, request: Request, session: Session) -> Response:
        space = request.path_params["space"]
        await run_in_threadpool(self.tenant_of, session, space)
        routers = await run_in_threadpool(
            views.read_routers, self.settings.routers, self.links(session)
        )
        return self.page(
            request,
            "connections.html",
            session=session,
            space=space,
            routers=views.client_connections(routers, space),
        )

    async def close_connection(self, request: Request, session: Session) -> Response:
        space = request.path_params["space"]
        router_id, identity = request.path_params["router"], request.path_params["identity"]
        router = next((r for r in self.settings.routers if r.id == router_id), None)
        if router is None:
            raise HTTPException(404, f"no router {router_id!r}")

        def close() -> None:
            links = self.links(session)
            links.use(router, lambda management: management.close_connection(identity))

        try:
            await run_in_threadpool(close)
            session.flash.append(f"connection {identity} on {router_id} closed")
        except MeshError as exc:
            session.flash.append(str(exc))
        return RedirectResponse(f"/spaces/{space}/connections", 303)

    async def mesh(self, request: Request, session: Session) -> Response:
        if not session.administrator:
            raise HTTPException(404, "the mesh is the stack administrator's page")
        routers = await run_in_threadpool(
            views.read_mesh, self.settings.routers, self.links(session)
        )
        return self.page(request, "mesh.html", session=session, routers=routers)

    async def refused(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        session = self.sessions.get(request.cookies.get(COOKIE))
        return self.page(request, "error.html", exc.status_code, session=session, detail=exc.detail)

    def routes(self) -> list[Route | Mount]:
        a, space = self.authenticated, "/spaces/{space}"
        return [
            Route("/login", self.login_page, methods=["GET"]),
            Route("/login", self.login, methods=["POST"]),
            *(self.keycloak.routes() if self.keycloak else []),
            Route("/logout", a(self.logout, post=True), methods=["POST"]),
            Route("/", a(self.home)),
            Route("/spaces", a(self.spaces)),
            Route("/mesh", a(self.mesh)),
            Route(space, a(self.space)),
            Route(f"{space}/rates.json", a(self.rates)),
            Route(f"{space}/addresses/new", a(self.new_address)),
            Route(f"{space}/addresses", a(self.create_address, post=True), methods=["POST"]),
            Route(f"{space}/addresses/{{address:path}}/delete", a(self.confirm_delete)),
            Route(
                f"{space}/addresses/{{address:path}}/delete",
                a(self.delete_address, post=True),
                methods=["POST"],
            ),
            *AddressPages(self).routes(space),
            *UserPages(self).routes(space),
            Route(f"{space}/connections", a(self.connections)),
            Route(
                f"{space}/connections/{{router}}/{{identity}}/close",
                a(self.close_connection, post=True),
                methods=["POST"],
            ),
            Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
        ]


async def _security_headers(request: Request, call_next: Any) -> Response:
    response: Response = await call_next(request)
    response.headers["Content-Security-Policy"] = "default-src 'self'; frame-ancestors 'none'"
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin"
    response.headers["Cache-Control"] = "no-store"
    return response


def create_app(settings: Settings) -> Starlette:
    console = Console(settings)
    return Starlette(
        routes=console.routes(),
        exception_handlers={HTTPException: console.refused},
        middleware=[Middleware(BaseHTTPMiddleware, dispatch=_security_headers)],
    )
