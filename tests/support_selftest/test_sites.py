"""The site harness (tests/support/sites): its inputs, and one real host's whole life:
boot, SSH, power off, power on, destroy with nothing left behind."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from tests.support.sites import SiteError, SiteSpec, create, destroy, leftovers
from tests.support.sites.base import BaseError, debian_mirror
from tests.support.sites.site import host_running, power_off, power_on, ssh


def test_mirror_is_read_from_deb822_and_one_line_sources(tmp_path: Path) -> None:
    deb822 = tmp_path / "debian.sources"
    deb822.write_text(
        "Types: deb\nURIs: http://security.example/debian-security\nSuites: bookworm-security\n\n"
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm\n"
    )
    assert debian_mirror((deb822,)) == "http://mirror.example/debian"
    one_line = tmp_path / "sources.list"
    one_line.write_text("deb [arch=amd64] http://old.example/debian bookworm main\n")
    assert debian_mirror((one_line,)) == "http://old.example/debian"
    with pytest.raises(BaseError, match="no Debian bookworm mirror"):
        debian_mirror((tmp_path / "missing",))


@pytest.mark.parametrize(
    ("name", "hosts", "network", "error"),
    [
        ("Site", 3, "192.168.251.0/24", "lowercase"),
        ("averylongname", 3, "192.168.251.0/24", "at most 8"),
        ("site", 3, "8.8.8.0/24", "private range"),
        ("site", 300, "192.168.251.0/24", "room for hosts"),
    ],
)
def test_bad_site_specs_are_refused(name: str, hosts: int, network: str, error: str) -> None:
    with pytest.raises(SiteError, match=error):
        SiteSpec(name, hosts, network)


def test_hosts_get_addresses_names_and_interfaces_that_fit() -> None:
    spec = SiteSpec("site", 3, "192.168.251.0/24")
    assert [h.address for h in spec.host_list()] == [
        "192.168.251.11",
        "192.168.251.12",
        "192.168.251.13",
    ]
    assert all(len(spec.veth(h)) <= 15 and len(spec.netns(h)) <= 15 for h in spec.host_list())
    assert spec.gateway == "192.168.251.1" and len(spec.bridge) <= 15


def _reachable(address: str) -> bool:
    try:
        socket.create_connection((address, 22), timeout=2).close()
    except OSError:
        return False
    return True


needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("systemd-nspawn") is None,
    reason="a real site needs root and systemd-nspawn (scripts/setup.sh installs it)",
)


@pytest.mark.slow
@needs_root
def test_a_host_boots_powers_off_comes_back_and_leaves_nothing() -> None:
    spec = SiteSpec("selftst", 1, "192.168.252.0/24")
    [host] = create(spec)
    try:
        assert ssh(spec, host, "cat /proc/1/comm").stdout.strip() == "systemd"
        assert ssh(spec, host, "hostname").stdout.strip() == host.name
        assert _reachable(host.address), "sshd not reachable through the bridge"
        ssh(spec, host, "echo kept > /root/disk")
        power_off(spec, host)
        assert not host_running(spec, host)
        assert not _reachable(host.address)
        power_on(spec, host)
        assert ssh(spec, host, "cat /root/disk").stdout.strip() == "kept"  # its disk survived
    finally:
        destroy(spec)
    assert leftovers(spec) == []


@pytest.mark.slow
@needs_root
def test_destroy_cleans_up_after_a_create_that_was_killed_half_way() -> None:
    spec = SiteSpec("selftst", 1, "192.168.252.0/24")
    [host] = spec.host_list()
    # What a create killed after the network step leaves.
    spec.work.mkdir(parents=True, exist_ok=True)
    subprocess.run(["ip", "link", "add", spec.bridge, "type", "bridge"], check=True)
    subprocess.run(["ip", "netns", "add", spec.netns(host)], check=True)
    assert leftovers(spec)
    destroy(spec)
    assert leftovers(spec) == []
