#!/usr/bin/python
"""Ansible module: before a run changes any host, check that this one has room on the
disks enmesh writes to and that the ports its routers and broker nodes will listen on
are free or held by enmesh's own programs."""

from __future__ import annotations

import ipaddress
import os
import pwd
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: enmesh_preflight
short_description: Check a host's disk room and ports before a run changes anything
description:
  - Free space of the filesystem holding each path (its nearest existing ancestor when
    the path is not there yet) must be at least min_free_mb.
  - Every TCP port the host's routers and broker nodes listen on (from deploy.json) must
    be free, or held by a process of one of allowed_users (enmesh's own programs, which a
    second run finds running). Read from /proc/net/tcp and tcp6 of the host's network
    namespace: no ss or netstat needed.
  - Fails with one message listing every problem, naming the host, the path or the
    address and port, what needs it and what to do. Changes nothing (check mode too).
options:
  host: {description: The host's inventory name (for messages)., type: str, required: true}
  address: {description: The host's site address (enmesh_host_address)., type: str, required: true}
  deployment: {description: deploy.json of the stack., type: dict, required: true}
  stack_file: {description: The stack file (for messages)., type: str, required: true}
  paths: {description: Paths enmesh writes to., type: list, elements: path, required: true}
  min_free_mb: {description: Free megabytes each needs., type: int, required: true}
  allowed_users:
    description: Accounts whose listeners are enmesh's own.
    type: list
    elements: str
    required: true
"""

LISTEN = "0A"  # TCP state code in /proc/net/tcp
WILDCARDS = ("0.0.0.0", "::")


@dataclass(frozen=True)
class Listener:
    address: str
    port: int
    uid: int


@dataclass(frozen=True)
class WantedPort:
    address: str
    port: int
    owner: str  # what will listen there
    setting: str  # where its port is set


def _address(hex_address: str) -> str:
    """/proc/net/tcp's little-endian hex (IPv4, or IPv6 as four 32-bit words)."""
    raw = bytes.fromhex(hex_address)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    if len(words) == 4:
        return ".".join(str(b) for b in words)
    mapped = words[:12] == b"\0" * 10 + b"\xff\xff"
    if mapped:
        return ".".join(str(b) for b in words[12:])
    return str(ipaddress.IPv6Address(words))


def parse_listeners(text: str) -> list[Listener]:
    """The listening sockets of one /proc/net/tcp{,6} file."""
    found = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 8 or fields[3] != LISTEN:
            continue
        hex_address, hex_port = fields[1].split(":")
        found.append(Listener(_address(hex_address), int(hex_port, 16), int(fields[7])))
    return found


def wanted_ports(deployment: Mapping[str, Any], address: str) -> list[WantedPort]:
    """The ports this host's routers and broker nodes listen on (deploy.json)."""
    wanted = [
        WantedPort(router["host"], int(port), f"router {router['id']}", "spec.routers.ports")
        for router in deployment.get("routers", [])
        if router["host"] == address
        for port in router["ports"].values()
    ]
    for broker in deployment.get("brokers", []):
        for node in broker.get("nodes", []):
            if node["host"] == address:
                owner, setting = f"broker {broker['name']}", f"spec.brokers[{broker['name']}]"
                wanted += [
                    WantedPort(node["host"], int(port), owner, f"{setting} ports")
                    for port in broker["ports"].values()
                ]
    return sorted(set(wanted), key=lambda w: (w.port, w.owner))


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def taken_ports(
    wanted: Iterable[WantedPort], listeners: Iterable[Listener], allowed: set[str]
) -> list[str]:
    problems = []
    listening = list(listeners)
    for port in wanted:
        for held in listening:
            same_place = held.address in (port.address, *WILDCARDS)
            if held.port == port.port and same_place and _user(held.uid) not in allowed:
                problems.append(
                    f"{port.address}:{port.port}, where {port.owner} listens, is taken by a "
                    f"process of {_user(held.uid)} on {held.address} (find it with "
                    f"`ss -ltnp 'sport = :{port.port}'`; stop it, or give {port.owner} "
                    f"another port: {port.setting})"
                )
                break
    return problems


def short_disks(paths: Iterable[str], min_free_mb: int) -> list[str]:
    """One problem per filesystem with less than min_free_mb free, naming its paths (a
    path not there yet counts on its nearest existing ancestor's filesystem)."""
    free: dict[int, tuple[int, list[str]]] = {}
    for path in paths:
        existing = Path(path)
        while not existing.exists():
            existing = existing.parent
        stat = os.statvfs(existing)
        free_mb = stat.f_bavail * stat.f_frsize // (1024 * 1024)
        free.setdefault(existing.stat().st_dev, (free_mb, []))[1].append(path)
    return [
        f"{', '.join(where)} {'is' if len(where) == 1 else 'are'} on a filesystem with "
        f"{free_mb} MB free, enmesh needs {min_free_mb} MB there (enmesh_base_min_free_mb): "
        "free space or grow the filesystem"
        for free_mb, where in free.values()
        if free_mb < min_free_mb
    ]


def _read_listeners() -> list[Listener]:
    found: list[Listener] = []
    for table in (Path("/proc/net/tcp"), Path("/proc/net/tcp6")):
        if table.exists():
            found += parse_listeners(table.read_text())
    return found


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "host": {"type": "str", "required": True},
            "address": {"type": "str", "required": True},
            "deployment": {"type": "dict", "required": True},
            "stack_file": {"type": "str", "required": True},
            "paths": {"type": "list", "elements": "path", "required": True},
            "min_free_mb": {"type": "int", "required": True},
            "allowed_users": {"type": "list", "elements": "str", "required": True},
        },
        supports_check_mode=True,
    )
    params = module.params
    problems = short_disks(params["paths"], params["min_free_mb"])
    wanted = wanted_ports(params["deployment"], params["address"])
    problems += taken_ports(wanted, _read_listeners(), set(params["allowed_users"]))
    if problems:
        module.fail_json(
            msg=f"{params['host']} is not ready for {params['stack_file']}: "
            + "; ".join(problems)
            + ". Nothing was changed on any host; run again once this is fixed.",
            problems=problems,
        )
    module.exit_json(changed=False, checked_ports=[f"{w.address}:{w.port}" for w in wanted])


if __name__ == "__main__":
    main()
