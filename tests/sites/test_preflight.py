"""Bad input at the site's door: a host that does not answer, a host whose port another
process holds, a host without room. site.yml stops before any host changes, with a
message naming the host and what to do (roles/enmesh_base/tasks/preflight.yml)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.sites.playbook import assert_untouched, run_playbook
from tests.support.mesh import wait_until


def test_a_host_that_does_not_answer_stops_the_run_before_any_host_changes(
    tmp_path: Path, hosts: dict[str, Any], spark_hosts: dict[str, Any]
) -> None:
    dead = {"ansible_host": "192.168.251.29", "enmesh_host_address": "192.168.251.29"}
    extra = {"all": {"children": {"enmesh": {"hosts": {"site-h9": dead}}}}}
    code, output = run_playbook(tmp_path, extra)
    assert code != 0
    assert "site-h9 (192.168.251.29) did not answer over SSH within 20 s" in output, output[-3000:]
    assert "Power it on, or correct its address" in output
    assert_untouched(output, hosts | spark_hosts)


@pytest.fixture
def squatted_router_port(hosts: dict[str, Any], deployment: dict[str, Any]) -> Iterator[str]:
    """The last router's host: its router stopped and a foreign process (root's Python
    HTTP server) listening on the router's amqps port; put back afterwards."""
    router = deployment["routers"][-1]
    address, port = router["host"], router["ports"]["amqps"]
    host = hosts[address]
    unit = f"enmesh-router-{router['id']}"
    host.check_output(f"systemctl stop {unit}")
    try:
        host.check_output(
            "systemd-run --unit=enmesh-test-squatter --collect "
            f"python3 -m http.server --bind {address} {port}"
        )
        wait_until(lambda: host.socket(f"tcp://{address}:{port}").is_listening, 30, "the squatter")
        yield f"{address}:{port}"
    finally:
        host.run("systemctl stop enmesh-test-squatter")
        host.check_output(f"systemctl start {unit}")
        wait_until(lambda: host.socket(f"tcp://{address}:{port}").is_listening, 60, f"{unit} back")


def test_a_host_whose_router_port_is_taken_stops_the_run_naming_host_and_port(
    tmp_path: Path,
    hosts: dict[str, Any],
    spark_hosts: dict[str, Any],
    deployment: dict[str, Any],
    squatted_router_port: str,
) -> None:
    code, output = run_playbook(tmp_path)
    assert code != 0
    router = deployment["routers"][-1]["id"]
    address = squatted_router_port.rsplit(":", 1)[0]
    name = hosts[address].ansible.get_variables()["inventory_hostname"]
    assert f"{name} is not ready for" in output, output[-3000:]
    assert (
        f"{squatted_router_port}, where router {router} listens, is taken by a process of root"
        in output
    )
    assert "spec.routers.ports" in output
    assert_untouched(output, hosts | spark_hosts)


def test_a_host_without_room_stops_the_run_naming_host_path_and_need(
    tmp_path: Path, hosts: dict[str, Any], spark_hosts: dict[str, Any]
) -> None:
    need = 10**9  # MB: more than any disk here has
    extra = {
        "all": {"children": {"enmesh": {"hosts": {"site-h1": {"enmesh_base_min_free_mb": need}}}}}
    }
    code, output = run_playbook(tmp_path, extra)
    assert code != 0
    assert "site-h1 is not ready for" in output, output[-3000:]
    assert re.search(
        rf"/opt/enmesh, .* on a filesystem with \d+ MB free, enmesh needs {need} MB", output
    )
    assert_untouched(output, hosts | spark_hosts)


def test_a_spark_host_without_the_shared_storage_stops_the_run_and_the_probe_is_gone(
    tmp_path: Path, hosts: dict[str, Any], spark_hosts: dict[str, Any], spark_master: str
) -> None:
    """site-h4 told to look for the shared storage at /opt, a directory of its own disk:
    the master's host writes its probe to the real shared storage, site-h4 does not find
    it there, and the run stops before any host changes, the probe removed again."""
    extra = {
        "all": {"children": {"spark": {"hosts": {"site-h4": {"enmesh_spark_shared_dir": "/opt"}}}}}
    }
    code, output = run_playbook(tmp_path, extra)
    assert code != 0
    master = spark_hosts[spark_master].ansible.get_variables()["inventory_hostname"]
    assert (
        f"site-h4: /opt is not the storage {master} writes to (its probe is missing here)" in output
    ), output[-3000:]
    assert_untouched(output, hosts | spark_hosts)
    shared = spark_hosts[spark_master].ansible.get_variables()["enmesh_spark_shared_dir"]
    assert not spark_hosts[spark_master].file(f"{shared}/.enmesh-preflight-site").exists
