"""The failover list in the open frame (qdrouterd's `failover-server-list`): each router of
a compiled 3-router stack lists the other two, next one first; a python-qpid-proton
client that follows it (enmesh.client_failover), connected with router 0's URL only,
reconnects to router 1 when router 0's process is killed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from proton import symbol
from proton.reactor import Backoff

from enmesh.client_failover import follow_failover_list
from tests.router.conftest import account, running_mesh
from tests.support.amqp import Scenario, run
from tests.support.mesh import Mesh


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    yield from running_mesh(tmp_path_factory, "full-mesh")  # its own: router 0 is killed


class FollowTheList(Scenario):
    """Connect to router 0; once open, follow its list and kill router 0; finish when
    the connection is open again."""

    def __init__(self, mesh: Mesh) -> None:
        super().__init__()
        self.mesh = mesh
        self.containers: list[str] = []
        self.listed: list[dict[Any, Any]] = []
        self.followed: list[str] = []

    def on_start(self, event: Any) -> None:
        options = account(self.mesh, 0, "device@iot").options()
        options["reconnect"] = Backoff(max_delay=1.0)
        self.connections.append(event.container.connect(**options))

    def on_connection_opened(self, event: Any) -> None:
        connection = event.connection
        self.containers.append(connection.remote_container)
        if len(self.containers) == 1:
            self.listed = connection.remote_properties[symbol("failover-server-list")]
            self.followed = follow_failover_list(connection)
            self.mesh.routers[0].kill()
        else:
            self.done()


def test_a_client_reconnects_to_the_next_router_of_the_list(mesh: Mesh) -> None:
    scenario = run(FollowTheList(mesh), timeout=60)
    router_1, router_2 = mesh.routers[1].amqp_port, mesh.routers[2].amqp_port
    assert scenario.listed == [
        {"network-host": "127.0.0.1", "port": str(router_1), "scheme": "amqp"},
        {"network-host": "127.0.0.1", "port": str(router_2), "scheme": "amqp"},
    ]
    assert scenario.followed == [
        f"amqp://127.0.0.1:{router_1}",
        f"amqp://127.0.0.1:{router_2}",
    ]
    assert scenario.containers == ["test-router-0", "test-router-1"]
