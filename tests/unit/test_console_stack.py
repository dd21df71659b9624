"""`spec.console` in the stack file: on by default for a stack of one host, off for a site,
refused (with the reason) when asked for on a stack of several hosts; its port is checked
against every other listener; its certificate and the administrator go into deploy.json.
And the source archive for the hosts carries the console's templates and static files."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from pathlib import Path

from enmesh.deploy.bundle import build_bundle
from tests.unit.test_cli import ROOT
from tests.unit.test_stack_ports import _render, _stack

TWO_HOSTS = [{"name": "broker-0", "host": "127.0.0.2"}]


def _console(tmp_path: Path, **spec: object) -> object:
    tmp_path.mkdir(exist_ok=True)
    code, err = _render(_stack(tmp_path, **spec), tmp_path / "out")
    assert code == 0, err
    return json.loads((tmp_path / "out" / "deploy.json").read_text())["console"]


def test_a_stack_of_one_host_runs_the_console_there(tmp_path: Path) -> None:
    assert _console(tmp_path, console={"port": 9443}) == {
        "host": "127.0.0.1",
        "port": 9443,
        "administrator": "admin@enmesh.stack",
        "requested": False,
        "certificates": [
            {
                "name": "console",
                "cert": "/var/lib/enmesh/tls/console.crt",
                "key": "/var/lib/enmesh/tls/console.key",
                "dnsNames": ["127.0.0.1", "localhost"],
            }
        ],
    }


def test_asked_for_it_says_so_for_the_role(tmp_path: Path) -> None:
    console = _console(tmp_path, console={"enabled": True})
    assert isinstance(console, dict)
    assert console["requested"] is True


def test_switched_off_or_on_a_site_there_is_none(tmp_path: Path) -> None:
    assert _console(tmp_path / "off", console={"enabled": False}) is None
    assert _console(tmp_path / "site", brokers=TWO_HOSTS) is None


def test_asked_for_on_a_stack_of_two_hosts_render_refuses_and_says_why(tmp_path: Path) -> None:
    stack = _stack(tmp_path, brokers=TWO_HOSTS, console={"enabled": True})
    code, err = _render(stack, tmp_path / "out")
    assert code == 1
    assert "spec.console.enabled" in err
    assert "spans 2 hosts (127.0.0.1, 127.0.0.2)" in err
    assert not (tmp_path / "out").exists()


def test_its_port_is_checked_against_the_other_listeners(tmp_path: Path) -> None:
    code, err = _render(_stack(tmp_path, console={"port": 5671}), tmp_path / "out")
    assert code == 1
    assert (
        "port 5671 on 127.0.0.1: router local-router-0 amqps (spec.routers.ports.amqps) "
        "and console (spec.console.port)"
    ) in err


def test_the_hosts_archive_carries_the_consoles_templates_and_static_files() -> None:
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(build_bundle(ROOT)))) as archive:
        names = set(archive.getnames())
    packaged = [
        path
        for folder in ("templates", "static")
        for path in (ROOT / "enmesh" / "console" / folder).rglob("*")
        if path.is_file()
    ]
    assert any(path.suffix == ".html" for path in packaged)
    assert any(path.suffix == ".js" for path in packaged)
    for path in packaged:
        assert f"enmesh-src/{path.relative_to(ROOT).as_posix()}" in names
    assert "enmesh-src/enmesh/compile/engines/qdrouterd-1.19-config-names.json" in names
