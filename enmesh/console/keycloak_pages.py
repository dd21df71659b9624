"""Logging in to the console through Keycloak (enmesh.console.oidc): `/login/keycloak`
sends the browser to Keycloak's login page; Keycloak sends it back to the callback with a
code, which becomes the user's tokens and a console session.

Who may: a user whose token carries its own space's `manage` group (Keycloak holds the
rights on a Keycloak stack, users made in Keycloak included). The login's own cookie is
`SameSite=Lax`, as it must come back on Keycloak's redirect; the session cookie stays
`Strict`, so the callback answers with a page that moves on by itself rather than a
redirect (a redirect chain that began on Keycloak's site would not carry it).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from enmesh.auth.authz import space_of
from enmesh.auth.realm import CONSOLE_CALLBACK_PATH
from enmesh.console.mesh import Credentials
from enmesh.console.oidc import OidcError, OidcLogin, Tokens
from enmesh.console.sessions import COOKIE, Session

if TYPE_CHECKING:
    from enmesh.console.app import Console

log = logging.getLogger("enmesh.console")
OIDC_COOKIE = "enmesh_console_oidc"
START_PATH = "/login/keycloak"


class KeycloakPages:
    def __init__(self, console: Console, login: OidcLogin) -> None:
        self.console, self.login = console, login

    def routes(self) -> list[Route]:
        return [
            Route(START_PATH, self.start, methods=["GET"]),
            Route(CONSOLE_CALLBACK_PATH, self.callback, methods=["GET"]),
        ]

    async def start(self, request: Request) -> Response:
        key, url = await run_in_threadpool(self.login.start)
        response = RedirectResponse(url, 303)
        response.set_cookie(
            OIDC_COOKIE,
            key,
            max_age=600,
            secure=self.console.settings.secure_cookies,
            httponly=True,
            samesite="lax",
        )
        return response

    async def callback(self, request: Request) -> Response:
        error = request.query_params.get("error")
        if error:  # the user cancelled, or Keycloak refused the client
            said = request.query_params.get("error_description", error)
            log.info("Keycloak login not completed: %s", said)
            return await self.refused(request, f"Keycloak: {said}")
        try:
            tokens = await run_in_threadpool(
                self.login.finish, request.cookies.get(OIDC_COOKIE), str(request.url)
            )
        except OidcError as exc:
            log.info("Keycloak login refused: %s", exc)
            return await self.refused(request, str(exc))
        space = space_of(tokens.identity)
        if space is None or f"/{space}/manage" not in tokens.groups:
            log.info("Keycloak login refused for %r: no manage right", tokens.identity)
            await run_in_threadpool(self.login.logout, tokens)
            return await self.refused(
                request, f"{tokens.identity} has no `manage` right: the console is for managers"
            )
        session = Session(
            Credentials(tokens.identity, tokens.access, space),
            space,
            tokens=tokens,
            renew=self.renew,
        )
        log.info("login through Keycloak: %s", tokens.identity)
        response = self.console.page(request, "signed_in.html", next="/")
        self.console.cookie(response, COOKIE, self.console.sessions.create(session))
        response.delete_cookie(OIDC_COOKIE)
        return response

    def renew(self, tokens: Tokens) -> Tokens:
        try:
            return self.login.refresh(tokens)
        except OidcError as exc:
            raise HTTPException(401, str(exc)) from None

    async def refused(self, request: Request, error: str) -> Response:
        response = await self.console.login_form(request, error, 401)
        response.delete_cookie(OIDC_COOKIE)
        return response

    async def logout(self, session: Session) -> None:
        if session.tokens is not None:
            await run_in_threadpool(self.login.logout, session.tokens)
