"""The console's hold on the mesh: management connections kept per session are closed when
an action fails and when an abandoned session expires; a write never runs twice; a login
goes to the next router when one is down. Real routers (the admin mesh), real SASL."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from proton import Endpoint

from enmesh.console.app import Console, Settings
from enmesh.console.main import routers_of
from enmesh.console.mesh import (
    CONNECTION_COLUMNS,
    Credentials,
    Management,
    ManagementLinks,
    MeshError,
    Router,
    check_login,
)
from enmesh.console.sessions import Session, Sessions
from tests.support.apply_target import stack_file
from tests.support.mesh import Mesh, wait_until
from tests.support.ports import free_port_block
from tests.support.qdmanage import ADMINISTRATOR


def _routers(mesh: Mesh) -> tuple[Router, ...]:
    return routers_of(json.loads((mesh.directory / "config" / "deploy.json").read_text()))


def _administrator(mesh: Mesh, password: str | None = None) -> Credentials:
    return Credentials(ADMINISTRATOR, password or mesh.passwords[ADMINISTRATOR], "localhost")


def _closed(management: Management) -> bool:
    connection = management.connection.conn  # BlockingConnection.close() drops it
    return connection is None or bool(connection.state & Endpoint.LOCAL_CLOSED)


def _down() -> Router:
    """A router URL on a free port nobody listens on."""
    return Router("down", f"amqps://127.0.0.1:{free_port_block(1)}")


class Recording:
    """Wraps an action: how often it ran, and on which connections."""

    def __init__(self, action: Callable[[Management, int], Any]) -> None:
        self.action, self.used = action, list[Management]()

    def __call__(self, management: Management) -> Any:
        self.used.append(management)
        return self.action(management, len(self.used))


def _query(management: Management, _: int) -> list[dict[str, Any]]:
    return management.query("connection", CONNECTION_COLUMNS)


def test_a_failed_write_runs_once_and_its_connection_is_closed(admin_mesh: Mesh) -> None:
    router = _routers(admin_mesh)[0]
    links = ManagementLinks(_administrator(admin_mesh), admin_mesh.ca)
    try:
        links.use(router, Recording(_query), read=True)  # a connection is now kept
        write = Recording(lambda m, _: m.close_connection("no-such-connection"))
        with pytest.raises(MeshError, match="no-such-connection"):
            links.use(router, write)
        assert len(write.used) == 1, "a failed write ran again"
        assert _closed(write.used[0])
        assert not links._open, "a connection whose action failed was kept"
    finally:
        links.close()


def test_a_read_on_a_stale_connection_runs_again_on_a_new_one(admin_mesh: Mesh) -> None:
    router = _routers(admin_mesh)[0]
    who = _administrator(admin_mesh)
    links = ManagementLinks(who, admin_mesh.ca)
    try:
        first = Recording(_query)
        links.use(router, first, read=True)
        kept = first.used[0]
        with Management(router, who, admin_mesh.ca) as other:  # the router drops it
            mine = kept.connection.container.container_id
            [row] = [r for r in _query(other, 0) if r["container"] == mine]
            other.close_connection(row["identity"])
        read = Recording(_query)
        rows = links.use(router, read, read=True)
        assert mine not in {row["container"] for row in rows}
        assert len(read.used) == 2 and read.used[0] is kept
        assert links._open[router.id] is read.used[1] and not _closed(read.used[1])
    finally:
        links.close()


def test_a_read_failing_twice_leaves_no_connection_open(admin_mesh: Mesh) -> None:
    router = _routers(admin_mesh)[0]
    links = ManagementLinks(_administrator(admin_mesh), admin_mesh.ca)
    try:
        links.use(router, Recording(_query), read=True)
        read = Recording(lambda m, _: m.query("no.such.entity", ["identity"]))
        with pytest.raises(MeshError, match=r"no\.such\.entity"):
            links.use(router, read, read=True)
        assert len(read.used) == 2
        assert all(_closed(management) for management in read.used)
        assert not links._open
    finally:
        links.close()


def test_an_abandoned_session_is_swept_with_its_connections(admin_mesh: Mesh) -> None:
    router = _routers(admin_mesh)[0]
    sessions = Sessions(idle_seconds=0.5)
    abandoned = Session(_administrator(admin_mesh), None)
    sessions.create(abandoned)
    read = Recording(_query)
    abandoned.management(admin_mesh.ca).use(router, read, read=True)
    assert not _closed(read.used[0])
    # Someone else's request (here: one with no cookie) is enough; its own never returns.
    wait_until(lambda: sessions.get(None) is None and len(sessions) == 0, 10, "the sweep")
    wait_until(lambda: _closed(read.used[0]), 10, "the swept session's connection to close")


def test_a_login_goes_to_the_next_router_when_one_is_down(admin_mesh: Mesh) -> None:
    routers = (_down(), *_routers(admin_mesh))
    assert check_login(routers, _administrator(admin_mesh), admin_mesh.ca)
    assert not check_login(routers, _administrator(admin_mesh, "wrong"), admin_mesh.ca)
    assert not check_login((_down(),), _administrator(admin_mesh), admin_mesh.ca)
    console = Console(
        Settings(
            stack_file=stack_file(admin_mesh),
            routers=routers,
            ca=admin_mesh.ca,
            target=lambda: pytest.fail("no change is made"),
            administrator=ADMINISTRATOR,
        )
    )
    session, error = console.authenticate(ADMINISTRATOR, admin_mesh.passwords[ADMINISTRATOR])
    assert session is not None and session.administrator, error
