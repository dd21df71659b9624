"""The stack administrator the compiler writes: its secret and the SASL database hold its
password, it logs in to the `$default` vhost and reads management as `enmesh status` and
`enmesh apply` do; nobody else gets into that vhost, and a wrong password gets nothing."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterator

import pytest
from proton import ConnectionException

from enmesh.compile import administrator
from enmesh.control.entities import router_entities
from enmesh.control.management import (
    Administrator,
    ManagementError,
    confirm_addresses,
    router_url,
    served,
)
from enmesh.deploy import stackctl
from enmesh.model.kinds import SPACE_NAME
from tests.router.conftest import account
from tests.support.mesh import Mesh, build_mesh


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    built = build_mesh(tmp_path_factory.mktemp("stack-admin"), routers=1)
    try:
        built.start()
        yield built
    finally:
        built.stop()


def _deployment(mesh: Mesh) -> dict[str, object]:
    return dict(json.loads((mesh.directory / "config" / "deploy.json").read_text()))


def test_the_compiled_administrator_reads_what_the_router_serves(mesh: Mesh) -> None:
    deployment = _deployment(mesh)
    admin = Administrator.of(deployment, mesh.secrets_dir)
    assert isinstance(admin, Administrator), admin
    assert admin.identity == administrator.IDENTITY and admin.vhost == "$default"
    router = deployment["routers"][0]  # type: ignore[index]
    conf = (mesh.directory / "config" / router["config"]).read_text()
    compiled = frozenset(key for kind, key in router_entities(conf, "r0") if kind == "address")
    found = confirm_addresses(router_url(router), admin, compiled)
    assert found.addresses == compiled and "iot/telemetry" in compiled
    assert found.connections >= 1  # its own
    with pytest.raises(ManagementError, match="missing \\['iot/nothing'\\]"):
        confirm_addresses(router_url(router), admin, compiled | {"iot/nothing"})


def test_a_wrong_password_gets_no_management(mesh: Mesh) -> None:
    deployment = _deployment(mesh)
    admin = Administrator.of(deployment, mesh.secrets_dir)
    assert isinstance(admin, Administrator)
    wrong = dataclasses.replace(admin, password=admin.password + "x")
    with pytest.raises(ManagementError, match=re.escape("login as admin@enmesh.stack failed")):
        served(router_url(deployment["routers"][0]), wrong)  # type: ignore[index]


def test_a_tenant_user_is_not_let_into_the_default_vhost(mesh: Mesh) -> None:
    """A user of an address space naming no space is refused as before the `$default`
    vhost existed: it serves its members only."""
    stray = dataclasses.replace(account(mesh, 0, "backend@iot"), vhost="localhost")
    with pytest.raises(ConnectionException, match="no address space 'localhost'"):
        stray.blocking().create_sender("$management")


def test_no_model_user_can_be_the_administrator() -> None:
    """Its realm has a dot; an address space name (a DNS label) cannot."""
    realm = administrator.IDENTITY.rpartition("@")[2]
    assert re.fullmatch(SPACE_NAME, realm) is None


def test_status_reports_what_each_router_serves(
    mesh: Mesh, capsys: pytest.CaptureFixture[str]
) -> None:
    deployment = _deployment(mesh)
    router = deployment["routers"][0]  # type: ignore[index]
    admin = Administrator.of(deployment, mesh.secrets_dir)
    assert stackctl._management_line(router, admin) is True
    unreadable = Administrator.of(deployment, mesh.directory / "no-secrets")
    assert stackctl._management_line(router, unreadable) is True  # not judged: not asked
    assert isinstance(admin, Administrator)
    wrong = dataclasses.replace(admin, password="wrong")
    assert stackctl._management_line(router, wrong) is False
    lines = capsys.readouterr().out.splitlines()
    assert re.fullmatch(
        r" +management \(admin@enmesh\.stack\): \d+ addresses, \d+ autoLinks, \d+ linkRoutes, "
        r"\d+ connections",
        lines[0],
    ), lines[0]
    assert "not asked: cannot read the administrator's secret" in lines[1]
    assert "management: FAILED: " in lines[2] and "login as admin@enmesh.stack failed" in lines[2]
