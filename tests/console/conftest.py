"""A 2-router mesh in front of RabbitMQ, the console in front of both, a headless Chromium."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import chromium_session
from tests.support.console import OPS, Console, serve_console
from tests.support.mesh import SAMPLE_MODEL, Mesh, build_mesh
from tests.support.prometheus import run_prometheus
from tests.support.qdmanage import ADMINISTRATOR, add_administrator
from tests.support.stack import brokered_mesh


def _model(folder: Path) -> Path:
    model = folder / "console.model.yml"
    model.write_text(SAMPLE_MODEL.read_text() + OPS)
    return model


@pytest.fixture(scope="package")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    folder = tmp_path_factory.mktemp("console")
    with brokered_mesh(folder, routers=2, models=[_model(folder)]) as running:
        yield running


@pytest.fixture(scope="package")
def admin_mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    """Two routers, no broker, with a stack administrator. Its own mesh: `enmesh apply`
    (which the other tests run) rebuilds the SASL database and policies from the model,
    and the administrator is in neither (a stack has no administrator identity yet)."""
    folder = tmp_path_factory.mktemp("console-admin")
    mesh = build_mesh(folder, routers=2, models=[_model(folder)])
    add_administrator(mesh)
    try:
        mesh.start()
        mesh.wait_converged()
        yield mesh
    finally:
        mesh.stop()


@pytest.fixture(scope="package")
def admin_console(admin_mesh: Mesh) -> Iterator[Console]:
    """With the stack's Prometheus (Debian's, scraping every second) for the charts."""
    with (
        run_prometheus(admin_mesh) as prometheus,
        serve_console(admin_mesh, administrator=ADMINISTRATOR, prometheus=prometheus) as served,
    ):
        yield served


@pytest.fixture(scope="package")
def console(mesh: Mesh) -> Iterator[Console]:
    with serve_console(mesh) as served:
        yield served


@pytest.fixture(scope="package")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    yield from chromium_session(tmp_path_factory)


@pytest.fixture
def runtime_file(mesh: Mesh) -> Path:
    return mesh.directory / "state" / "runtime" / "console.model.yml"
