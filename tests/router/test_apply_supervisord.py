"""The path `make up` takes on this machine: a router run by supervisord is reloaded through
`supervisorctl signal HUP` (`enmesh deploy reload`, as the router role runs it, and
`enmesh apply`'s Supervisord signaller), never restarted: its pid stays."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from enmesh.cli import main
from enmesh.control.apply import apply_stack
from enmesh.control.routers import Supervisord
from enmesh.control.target import from_deployment
from tests.support.apply_target import SHOP_ORDERS, SHOP_SPACE, model_file, stack_file
from tests.support.mesh import ROUTER_BIN, SAMPLE_MODEL, Mesh, build_mesh, wait_until
from tests.support.ports import port_is_listening

PROGRAM = "enmesh-router-test-router-0"


def _supervisor_config(mesh: Mesh, directory: Path) -> Path:
    router = mesh.routers[0]
    config = directory / "supervisord.conf"
    config.write_text(
        f"[unix_http_server]\nfile={directory}/supervisor.sock\n\n"
        f"[supervisord]\nnodaemon=true\nuser=root\nlogfile={directory}/supervisord.log\n"
        f"pidfile={directory}/supervisord.pid\nchildlogdir={directory}\n\n"
        "[rpcinterface:supervisor]\n"
        "supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface\n\n"
        f"[supervisorctl]\nserverurl=unix://{directory}/supervisor.sock\n\n"
        f"[program:{PROGRAM}]\n"
        f"command={ROUTER_BIN} --config {router.config} --admission {router.admission}\n"
        f"stdout_logfile={router.log}\nredirect_stderr=true\nautorestart=false\n"
        "stopasgroup=true\nkillasgroup=true\n"
    )
    return config


@pytest.fixture(scope="module")
def supervised(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Mesh, Path]]:
    directory = tmp_path_factory.mktemp("supervised")
    mesh = build_mesh(directory / "mesh", routers=1)
    config = _supervisor_config(mesh, directory)
    daemon = subprocess.Popen(
        ["supervisord", "-c", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_until(lambda: port_is_listening(mesh.routers[0].amqp_port), 30, "supervised router")
        yield mesh, config
    finally:
        daemon.terminate()
        daemon.wait(30)


def _pid(config: Path) -> int:
    out = subprocess.run(
        ["supervisorctl", "-c", str(config), "pid", PROGRAM],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return int(out.strip())


def test_apply_reloads_a_supervised_router_without_restarting_it(
    supervised: tuple[Mesh, Path],
) -> None:
    mesh, config = supervised
    pid = _pid(config)
    deployment = json.loads((mesh.directory / "config" / "deploy.json").read_text())
    target = from_deployment(deployment, signaller=Supervisord(str(config)), brokers={})
    model_file(mesh).write_text(SAMPLE_MODEL.read_text() + SHOP_SPACE + SHOP_ORDERS)
    result = apply_stack(stack_file(mesh), target)
    assert result.routers == {"test-router-0": "reloaded"}
    assert 'address="shop/orders"' in mesh.routers[0].metrics()
    assert _pid(config) == pid


def test_the_role_step_reloads_only_when_the_installed_files_changed(
    supervised: tuple[Mesh, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    mesh, config = supervised
    pid = _pid(config)
    step = ["deploy", "reload", "--config-dir", str(mesh.directory / "config")]
    step += ["--router", "test-router-0", "--manager", "supervisord"]
    step += ["--supervisor-config", str(config)]
    assert main(step) == 0
    assert capsys.readouterr().out.startswith("unchanged:")  # what a second `make up` sees
    conf = mesh.routers[0].config
    conf.write_text(conf.read_text() + "\naddress {\n    prefix: iot/by-hand\n}\n")
    assert main(step) == 0
    assert capsys.readouterr().out == "changed: router test-router-0 reloaded\n"
    assert 'address="iot/by-hand"' in mesh.routers[0].metrics()
    assert _pid(config) == pid
