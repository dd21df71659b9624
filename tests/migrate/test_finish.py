"""`enmesh migrate finish` against a real mesh and RabbitMQ: a source holding messages or
serving a client is not removable, and finish names what remains (the queue and its count,
the router and the client's user); once the messages are taken and the client is gone, it
says the source can go. The administrator's own management session is not a client."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from proton import Message

from enmesh.migrate.finish import finish_and_remove, remaining
from tests.router.conftest import account
from tests.support.mesh import Mesh, wait_until
from tests.support.migrate_ends import depth, stack_end
from tests.support.stack import brokered_mesh


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    with brokered_mesh(tmp_path_factory.mktemp("source"), routers=1) as mesh:
        yield mesh


def test_finish_names_what_remains_until_the_source_is_empty(source: Mesh) -> None:
    end = stack_end("source", source)
    assert remaining(end, source.secrets_dir).empty  # a new stack: nothing stored, no client

    client = account(source, 0, "device@iot").blocking(timeout=30)
    try:
        sender = client.create_sender("events")
        for n in range(3):
            sender.send(Message(body=f"event {n}", durable=True))
        wait_until(lambda: depth(source, "iot.events") == 3, 30, "3 stored on the source")
        left = remaining(end, source.secrets_dir)
        assert left.messages == {"broker-0 enmesh/iot.events": 3}
        assert [c.split(" (")[0] for c in left.clients] == ["test-router-0: device@iot"]
        text = left.text("source")
        assert "cannot be removed yet" in text and "iot.events: 3 message(s)" in text
    finally:
        client.close()

    reader = account(source, 0, "backend@iot").blocking(timeout=30)
    try:
        receiver = reader.create_receiver("events", credit=3)
        for _ in range(3):
            receiver.receive(timeout=30)
            receiver.accept()
    finally:
        reader.close()
    wait_until(lambda: remaining(end, source.secrets_dir).empty, 30, "an empty source")
    assert "can be removed" in remaining(end, source.secrets_dir).text("source")


@dataclass
class _MeshRouters:
    """The test mesh's routers as a Signaller: a stop waits until the process is gone."""

    mesh: Mesh
    stopped: list[str] = field(default_factory=list)

    def _process(self, router: str) -> subprocess.Popen[bytes]:
        process = self.mesh.routers[int(router.rsplit("-", 1)[1])].process
        assert process is not None
        return process

    def reload(self, router: str) -> None:
        raise AssertionError(f"finish never reloads ({router})")

    def restart(self, router: str) -> None:
        raise AssertionError(f"nothing came in: {router} must stay down")

    def stop(self, router: str) -> None:
        self._process(router).terminate()
        self._process(router).wait(30)
        self.stopped.append(router)


def test_removing_stops_the_routers_first_and_counts_again(source: Mesh) -> None:
    """Once the check passes, no client may slip in: the routers stop before the count
    that decides, and the removal runs only after it (this test runs last: it stops them)."""
    routers = _MeshRouters(source)
    removed: list[list[str]] = []
    left = finish_and_remove(
        stack_end("source", source),
        source.secrets_dir,
        routers,
        lambda: removed.append(list(routers.stopped)),
    )
    assert left.empty
    assert removed == [["test-router-0"]]  # removed once, with the source's router down
