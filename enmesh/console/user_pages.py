"""The console's pages for the users of a space: list, create (password shown once),
delete, a new password (generated and shown once, or chosen) and its rights (the rules
of a user the console added), each change through the runtime part or the user's
secret, then `enmesh apply`."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from enmesh.console import passwords
from enmesh.console.runtime import GENERAL, OPERATIONS, ChangeError, RuleRow, user_name
from enmesh.console.sessions import Session
from enmesh.model import Tenant

if TYPE_CHECKING:
    from enmesh.console.app import Console

log = logging.getLogger("enmesh.console")
MAX_RULES = 50  # rule rows read from a rights form


class UserPages:
    def __init__(self, console: Console) -> None:
        self.console = console

    def routes(self, space: str) -> list[Route]:
        a = self.console.authenticated
        user = f"{space}/users/{{username}}"
        return [
            Route(f"{space}/users", a(self.users)),
            Route(f"{space}/users/new", a(self.new_user)),
            Route(f"{space}/users", a(self.create_user, post=True), methods=["POST"]),
            Route(f"{user}/delete", a(self.confirm_delete_user)),
            Route(f"{user}/delete", a(self.delete_user, post=True), methods=["POST"]),
            Route(f"{user}/password", a(self.password_form)),
            Route(f"{user}/password", a(self.change_password, post=True), methods=["POST"]),
            Route(f"{user}/rights", a(self.rights_form)),
            Route(f"{user}/rights", a(self.edit_rights, post=True), methods=["POST"]),
        ]

    async def users(self, request: Request, session: Session) -> Response:
        console, space = self.console, request.path_params["space"]

        def gather() -> tuple[Tenant, set[str]]:
            return console.tenant_of(session, space), console.changes.source().added_names()

        tenant, added = await run_in_threadpool(gather)
        return console.page(request, "users.html", session=session, tenant=tenant, added=added)

    async def new_user(self, request: Request, session: Session) -> Response:
        console = self.console
        tenant = await run_in_threadpool(console.tenant_of, session, request.path_params["space"])
        return console.form_page(
            request, "user_new.html", session, tenant, values={"operations": []}, errors={}
        )

    async def create_user(self, request: Request, session: Session) -> Response:
        console, space = self.console, request.path_params["space"]
        form = await request.form()
        values: dict[str, Any] = {
            "username": str(form.get("username", "")),
            "addresses": str(form.get("addresses", "")),
            "operations": [str(op) for op in form.getlist("operations")],
        }
        tenant = await run_in_threadpool(console.tenant_of, session, space)
        try:
            errors, password = await run_in_threadpool(console.changes.create_user, space, values)
        except ChangeError as exc:
            errors, password = {GENERAL: [str(exc)]}, ""
        if errors:
            return console.form_page(
                request, "user_new.html", session, tenant, values=values, errors=errors
            )
        log.info("user %s@%s created", values["username"], space)  # never its password
        return self._shown_once(request, session, tenant, values["username"], password, status=201)

    async def confirm_delete_user(self, request: Request, session: Session) -> Response:
        console = self.console
        tenant = await run_in_threadpool(console.tenant_of, session, request.path_params["space"])
        return console.page(
            request,
            "user_delete.html",
            session=session,
            tenant=tenant,
            username=request.path_params["username"],
        )

    async def delete_user(self, request: Request, session: Session) -> Response:
        space = request.path_params["space"]
        return await self.console.confirmed_delete(
            request, session, "username", f"/spaces/{space}/users", self.console.changes.delete_user
        )

    async def password_form(self, request: Request, session: Session) -> Response:
        tenant, username = await self._user(request, session)
        return self._password_page(request, session, tenant, username, errors={})

    async def change_password(self, request: Request, session: Session) -> Response:
        """`generate`: a new random password, shown once; `choose`: the one typed twice."""
        tenant, username = await self._user(request, session)
        form = await request.form()
        chosen: str | None = None
        if form.get("mode") == "choose":
            chosen, again = str(form.get("password", "")), str(form.get("again", ""))
            problem = passwords.problem(chosen) or (
                "the two entries differ" if chosen != again else None
            )
            if problem is not None:
                errors = {"password": [problem]}
                return self._password_page(request, session, tenant, username, errors=errors)
        try:
            password = await run_in_threadpool(
                passwords.change_password, self.console.changes, tenant.name, username, chosen
            )
        except ChangeError as exc:
            errors = {GENERAL: [str(exc)]}
            return self._password_page(request, session, tenant, username, errors=errors)
        if chosen is not None:
            session.flash.append(f"password of {username} changed; the next login needs it")
            return RedirectResponse(f"/spaces/{tenant.name}/users", 303)
        return self._shown_once(
            request, session, tenant, username, password, status=200, changed=True
        )

    async def rights_form(self, request: Request, session: Session) -> Response:
        """The user's rules, one row each, and a blank row for another."""
        tenant, username = await self._added_user(request, session)
        user = next(u for u in tenant.users if u.spec.username == username)
        rows = [
            RuleRow([op.value for op in rule.operations], " ".join(rule.addresses))
            for rule in user.spec.authorization
        ]
        return self._rights_page(
            request, session, tenant, username, [*rows, RuleRow([], "")], errors={}
        )

    async def edit_rights(self, request: Request, session: Session) -> Response:
        tenant, username = await self._added_user(request, session)
        form = await request.form()
        rows = [
            RuleRow(
                [str(op) for op in form.getlist(f"operations-{n}")], str(form[f"addresses-{n}"])
            )
            for n in range(MAX_RULES)
            if f"addresses-{n}" in form
        ]
        try:
            errors = await run_in_threadpool(
                self.console.changes.edit_rights, tenant.name, username, rows
            )
        except ChangeError as exc:
            errors = {GENERAL: [str(exc)]}
        if errors:
            return self._rights_page(request, session, tenant, username, rows, errors=errors)
        log.info("rights of %s@%s changed", username, tenant.name)
        session.flash.append(f"rights of {username}@{tenant.name} changed")
        return RedirectResponse(f"/spaces/{tenant.name}/users", 303)

    async def _added_user(self, request: Request, session: Session) -> tuple[Tenant, str]:
        """A user of the space that the console added (a user in git is changed in git)."""
        tenant, username = await self._user(request, session)
        added = await run_in_threadpool(lambda: self.console.changes.source().added_names())
        if user_name(tenant.name, username) not in added:
            raise HTTPException(409, f"{username}@{tenant.name} is defined in git: change it there")
        return tenant, username

    def _rights_page(
        self,
        request: Request,
        session: Session,
        tenant: Tenant,
        username: str,
        rows: list[RuleRow],
        *,
        errors: dict[str, list[str]],
    ) -> Response:
        return self.console.form_page(
            request,
            "user_rights.html",
            session,
            tenant,
            values={},
            errors=errors,
            username=username,
            rows=rows,
            operations=OPERATIONS,
        )

    async def _user(self, request: Request, session: Session) -> tuple[Tenant, str]:
        console, username = self.console, request.path_params["username"]
        tenant = await run_in_threadpool(console.tenant_of, session, request.path_params["space"])
        if not any(u.spec.username == username for u in tenant.users):
            raise HTTPException(404, f"no user {username!r} in {tenant.name!r}")
        return tenant, username

    def _password_page(
        self,
        request: Request,
        session: Session,
        tenant: Tenant,
        username: str,
        *,
        errors: dict[str, list[str]],
    ) -> Response:
        return self.console.form_page(
            request,
            "user_password.html",
            session,
            tenant,
            values={},
            errors=errors,
            username=username,
        )

    def _shown_once(
        self,
        request: Request,
        session: Session,
        tenant: Tenant,
        username: str,
        password: str,
        *,
        status: int,
        changed: bool = False,
    ) -> Response:
        return self.console.page(
            request,
            "user_created.html",
            status,
            session=session,
            tenant=tenant,
            username=username,
            password=password,
            changed=changed,
        )
