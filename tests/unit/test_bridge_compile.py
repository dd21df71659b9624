"""Bridges in the compiled router configs: connectors to the peer's routers with their own
sslProfile; a stack that leaves its brokers to the peer has no broker connectors and names
brokers by container; a runtime bridge file joins the stack file's; two stacks of one name
and a bad bridge file are refused, naming what is wrong. Each config is also loaded by
enmesh-router's own config reader, as the router would at start or reload."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from enmesh.compile import compile_stack_file
from enmesh.compile.bridge import bridge_file
from enmesh.compile.errors import CompileError
from enmesh.router.config import load_router_config
from tests.unit.test_stack_ports import _stack

PEER = {"id": "onprem-router-0", "host": "127.0.0.1", "port": 56671}
TLS = {
    "caCertFile": "/var/lib/enmesh/tls/bridge-onprem-ca.crt",
    "certFile": "/var/lib/enmesh/tls/bridge-onprem.crt",
    "privateKeyFile": "/var/lib/enmesh/tls/bridge-onprem.key",
}


def _router_conf(stack: Path, tmp_path: Path, index: int = 0) -> str:
    _, artefacts = compile_stack_file(stack)
    text = artefacts.files[f"routers/local-router-{index}.conf"]
    # The router reads its policy files from the stack's config directory (/etc/enmesh on
    # a host): the compiled ones go to a directory of the test, which the loaded copy names.
    policies = tmp_path / "config" / "auth" / "policies"
    policies.mkdir(parents=True, exist_ok=True)
    for name, content in artefacts.files.items():
        if name.startswith("auth/policies/"):
            (policies / Path(name).name).write_text(content)
    located = re.sub(r"(?m)^(\s*policyDir: ).*$", rf"\g<1>{policies}", text)
    path = tmp_path / f"router-{index}.conf"
    path.write_text(located)
    load_router_config(path)  # what the router itself accepts
    return text


def _state(tmp_path: Path) -> dict[str, str]:
    return {"config": "/etc/enmesh", "state": str(tmp_path / "state"), "secrets": "/etc/enmesh/s"}


def test_each_router_connects_to_the_peers_routers_with_the_bridge_profile(
    tmp_path: Path,
) -> None:
    bridges = [{"peer": "onprem", "connect": [PEER], "tls": TLS}]
    stack = _stack(tmp_path, bridges=bridges, paths=_state(tmp_path))
    for index in (0, 1, 2):
        conf = _router_conf(stack, tmp_path, index)
        assert (
            "connector {\n    name: bridge-onprem-router-0\n    host: 127.0.0.1\n"
            "    port: 56671\n    role: inter-router\n    saslMechanisms: EXTERNAL\n"
            "    sslProfile: bridge-onprem-tls\n    verifyHostname: true\n}"
        ) in conf
        assert (
            "name: bridge-onprem-tls\n    caCertFile: /var/lib/enmesh/tls/bridge-onprem-ca" in conf
        )
        assert "role: route-container" in conf  # its own brokers stay


def test_without_tls_the_bridge_uses_the_stacks_inter_router_profile(tmp_path: Path) -> None:
    stack = _stack(tmp_path, bridges=[{"peer": "onprem", "connect": [PEER]}])
    conf = _router_conf(stack, tmp_path)
    assert "name: bridge-onprem-router-0" in conf
    assert "bridge-onprem-tls" not in conf
    connector = conf[conf.index("name: bridge-onprem-router-0") :]
    assert connector[: connector.index("}")].count("sslProfile: inter-router-tls") == 1


def test_a_stack_using_the_peers_brokers_has_no_broker_connector(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    plain = _router_conf(_stack(tmp_path / "plain"), tmp_path)
    assert "role: route-container" in plain
    assert "connection: broker-0" in plain
    handed = _router_conf(
        _stack(tmp_path, bridges=[{"peer": "onprem", "brokers": "peer"}]), tmp_path
    )
    assert "role: route-container" not in handed
    assert "connection: broker-0" not in handed
    # Every address entity still there, naming the broker by a container never connected.
    assert handed.count("containerId: broker-0") == plain.count("connection: broker-0")


def test_a_runtime_bridge_file_joins_the_stack_files(tmp_path: Path) -> None:
    stack = _stack(tmp_path, paths=_state(tmp_path))
    runtime = bridge_file(tmp_path / "state" / "runtime", "onprem")
    runtime.parent.mkdir(parents=True)
    runtime.write_text(json.dumps({"peer": "onprem", "connect": [PEER]}))
    assert "name: bridge-onprem-router-0" in _router_conf(stack, tmp_path)
    runtime.write_text('{"peer": "onprem", "brokers": "theirs"}')
    with pytest.raises(CompileError, match=r"bridge-onprem.json: not a bridge.*brokers"):
        compile_stack_file(stack)


def test_a_peer_router_with_one_of_our_ids_is_refused(tmp_path: Path) -> None:
    same = {**PEER, "id": "local-router-1"}
    stack = _stack(tmp_path, bridges=[{"peer": "local2", "connect": [same]}])
    with pytest.raises(CompileError, match="router 'local-router-1' has the id of a router"):
        compile_stack_file(stack)


def test_two_bridges_to_one_peer_are_refused(tmp_path: Path) -> None:
    stack = _stack(tmp_path, bridges=[{"peer": "onprem"}], paths=_state(tmp_path))
    runtime = bridge_file(tmp_path / "state" / "runtime", "onprem")
    runtime.parent.mkdir(parents=True)
    runtime.write_text(json.dumps({"peer": "onprem", "brokers": "peer"}))
    with pytest.raises(CompileError, match=r"more than one bridge to stack\(s\) onprem"):
        compile_stack_file(stack)
