"""Router meshes shared by the router tests (real processes, compiled configs)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.amqp import Account
from tests.support.mesh import Mesh, build_mesh


def started(mesh: Mesh) -> Mesh:
    mesh.start()
    mesh.wait_converged()
    return mesh


@pytest.fixture(scope="session")
def full_mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    """3 routers, each connected to the other two."""
    mesh = build_mesh(tmp_path_factory.mktemp("full-mesh"), routers=3, topology="full-mesh")
    try:
        yield started(mesh)
    finally:
        mesh.stop()


@pytest.fixture(scope="session")
def chain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    """A - B - C: router 0 reaches router 2 only through router 1."""
    mesh = build_mesh(tmp_path_factory.mktemp("chain"), routers=3, topology="chain")
    try:
        yield started(mesh)
    finally:
        mesh.stop()


def account(mesh: Mesh, router: int, identity: str, tls: bool = False) -> Account:
    vhost = identity.split("@", 1)[1]
    mechanisms = "PLAIN" if tls else "SCRAM-SHA-256"
    return Account(
        mesh.url(router, tls), identity, mesh.passwords[identity], vhost, mesh.ca, mechanisms
    )
