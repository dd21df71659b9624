"""The enmesh_preflight module's checks (roles/enmesh_base/library), against this
machine's real sockets and filesystems."""

from __future__ import annotations

import getpass
import importlib.util
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

MODULE = Path(__file__).resolve().parents[2] / "roles/enmesh_base/library/enmesh_preflight.py"


@pytest.fixture(scope="module")
def preflight() -> ModuleType:
    spec = importlib.util.spec_from_file_location("enmesh_preflight", MODULE)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["enmesh_preflight"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def squatter() -> Iterator[int]:
    """A foreign listener on 127.0.0.1 (this test's own user)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def _listeners(preflight: ModuleType) -> list[object]:
    return list(preflight._read_listeners())


def test_a_listening_socket_is_read_from_proc_with_its_address_port_and_uid(
    preflight: ModuleType, squatter: int
) -> None:
    found = _listeners(preflight)
    assert preflight.Listener("127.0.0.1", squatter, os.getuid()) in found


def test_an_ipv6_wildcard_listener_is_read_as_such(preflight: ModuleType) -> None:
    with socket.socket(socket.AF_INET6) as sock:
        sock.bind(("::", 0))
        sock.listen()
        port = sock.getsockname()[1]
        assert any((held.address, held.port) == ("::", port) for held in _listeners(preflight))


DEPLOYMENT = {
    "routers": [
        {"id": "r0", "host": "127.0.0.1", "ports": {"amqp": 0, "amqps": 1}},
        {"id": "r1", "host": "10.0.0.2", "ports": {"amqp": 2}},
    ],
    "brokers": [{"name": "b0", "ports": {"amqps": 3, "dist": 4}, "nodes": [{"host": "127.0.0.1"}]}],
}


def test_the_wanted_ports_are_those_of_this_hosts_routers_and_broker_nodes(
    preflight: ModuleType,
) -> None:
    wanted = preflight.wanted_ports(DEPLOYMENT, "127.0.0.1")
    assert [(w.port, w.owner) for w in wanted] == [
        (0, "router r0"),
        (1, "router r0"),
        (3, "broker b0"),
        (4, "broker b0"),
    ]


def test_a_port_held_by_a_foreign_process_is_named_and_one_held_by_ours_is_not(
    preflight: ModuleType, squatter: int
) -> None:
    wanted = [preflight.WantedPort("127.0.0.1", squatter, "router r0", "spec.routers.ports")]
    listeners = _listeners(preflight)
    (problem,) = preflight.taken_ports(wanted, listeners, {"enmesh"})
    assert f"127.0.0.1:{squatter}" in problem and "router r0" in problem
    assert f"process of {getpass.getuser()}" in problem and "spec.routers.ports" in problem
    assert preflight.taken_ports(wanted, listeners, {getpass.getuser()}) == []
    elsewhere = [preflight.WantedPort("10.9.9.9", squatter, "router r1", "x")]
    assert preflight.taken_ports(elsewhere, listeners, {"enmesh"}) == []


def test_a_filesystem_short_of_room_is_named_once_with_its_paths_and_free_space(
    preflight: ModuleType, tmp_path: Path
) -> None:
    missing = tmp_path / "not" / "there"
    (problem,) = preflight.short_disks([str(missing), str(tmp_path)], 10**12)
    assert problem.startswith(f"{missing}, {tmp_path} are on a filesystem with ")
    assert "MB free, enmesh needs 1000000000000 MB" in problem
    assert preflight.short_disks([str(missing)], 1) == []
