"""`enmesh up|down|status --stack NAME`: the local and on-premise stacks from the CLI.

`up` runs `playbooks/site.yml` on `stacks/<name>.inventory.yml` with Ansible's own
progress output, then the smoke check, then prints the endpoints; `down` runs
`playbooks/teardown.yml`; `status` probes every router and broker port the stack
declares and the routers' view of the mesh, then Prometheus and Spark (observability.py).
The playbook's last play writes
`build/<stack>/endpoints.json` (URLs, CA and secrets locations as the deployer sees them),
which `status` and the smoke check read.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from enmesh.control.management import Administrator, ManagementError, router_url, served
from enmesh.deploy import observability, queue_depth
from enmesh.deploy.smoke import Access, Stack
from enmesh.deploy.smoke_run import run_smoke

RECAP = re.compile(r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)")
# Ansible colours the recap when told to (molecule sets ANSIBLE_FORCE_COLOR for the
# verifier's environment too): the counts are read with the colour codes removed.
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


def recap_counts(line: str) -> tuple[int, bool] | None:
    """A PLAY RECAP host line's changes and whether the host failed; None for other lines."""
    match = RECAP.match(ANSI_ESCAPE.sub("", line))
    if match is None:
        return None
    return int(match[3]), int(match[4]) > 0 or int(match[5]) > 0


class StackError(Exception):
    """The stack could not be brought up, down or inspected; says what to do."""


@dataclass(frozen=True)
class Project:
    root: Path
    stack: str

    @property
    def inventory(self) -> Path:
        path = self.root / "stacks" / f"{self.stack}.inventory.yml"
        if not path.is_file():
            raise StackError(
                f"no inventory for stack {self.stack!r}: {path} does not exist "
                "(copy stacks/onprem.example.inventory.yml to start one)"
            )
        return path

    @property
    def build_dir(self) -> Path:
        return self.root / "build" / self.stack

    @cached_property
    def deployment(self) -> dict[str, Any]:
        """The rendered stack's deploy.json (read once)."""
        return dict(json.loads((self.build_dir / "deploy.json").read_text(encoding="utf-8")))

    def playbook(self, name: str, *extra: str) -> int:
        """Run a playbook, streaming Ansible's output; returns the number of changes."""
        command = [
            str(Path(sys.executable).with_name("ansible-playbook")),
            "-i",
            str(self.inventory),
            str(self.root / "playbooks" / name),
            *extra,
        ]
        env = os.environ | {"ANSIBLE_CONFIG": str(self.root / "ansible.cfg")}
        changed, failed = 0, False
        with subprocess.Popen(
            command, cwd=self.root, env=env, stdout=subprocess.PIPE, text=True, bufsize=1
        ) as process:
            assert process.stdout is not None
            for line in process.stdout:
                sys.stdout.write(line)
                counts = recap_counts(line)
                if counts:
                    changed += counts[0]
                    failed |= counts[1]
        if process.returncode != 0 or failed:
            raise StackError(f"{name} failed (exit {process.returncode}); see the task above")
        return changed

    def endpoints(self) -> dict[str, Any]:
        path = self.build_dir / "endpoints.json"
        try:
            return dict(json.loads(path.read_text(encoding="utf-8")))
        except OSError:
            raise StackError(
                f"stack {self.stack!r} was never brought up from here ({path} is missing): "
                f"run `enmesh up --stack {self.stack}`"
            ) from None

    def smoke_stack(self) -> Stack:
        endpoints = self.endpoints()
        deployment = json.loads((self.build_dir / "deploy.json").read_text(encoding="utf-8"))
        return Stack(deployment, self.build_dir, Path(endpoints["secrets"]), Path(endpoints["ca"]))


def client_ca(endpoints: dict[str, Any], deployment: dict[str, Any]) -> str:
    """The CA file to give clients: the copy installed on every router host, not the
    deployer's PKI directory (where the CA's private key sits next to it)."""
    return str(deployment.get("ca") or endpoints["ca"])


def _try_it(endpoints: dict[str, Any], deployment: dict[str, Any], build_dir: Path) -> list[str]:
    """`enmesh send`/`receive` lines for the first anycast address someone may use."""
    first, last = deployment["routers"][0], deployment["routers"][-1]
    standard = {u["space"] for u in deployment["users"]}
    for entry in deployment["addresses"]:
        if entry["type"] != "anycast" or entry["space"] not in standard:
            continue
        access = Access.load(build_dir / "auth" / "policies" / f"{entry['space']}.json")
        sender, receiver = access.sender(entry["address"]), access.receiver(entry["address"])
        if sender is None or receiver is None:
            continue
        secret = {u["identity"]: u["secret"] for u in deployment["users"]}
        common = f"--ca {client_ca(endpoints, deployment)} --count 3"
        return [
            f"  .venv/bin/enmesh receive amqps://{last['host']}:{last['ports']['amqps']} "
            f"{entry['address']} --user {receiver} "
            f"--password-file {endpoints['secrets']}/{secret[receiver]}/password {common}",
            f"  .venv/bin/enmesh send amqps://{first['host']}:{first['ports']['amqps']} "
            f"{entry['address']} --user {sender} "
            f"--password-file {endpoints['secrets']}/{secret[sender]}/password {common}",
        ]
    return ["  (no anycast address with a sender and a receiver in this model)"]


def describe(endpoints: dict[str, Any], deployment: dict[str, Any], build_dir: Path) -> str:
    """The endpoints block `enmesh up` prints."""
    lines = [
        f"stack {deployment['stack']!r} is up.",
        "",
        "Router endpoints (any router serves every address):",
    ]
    for router in deployment["routers"]:
        ports = router["ports"]
        lines.append(
            f"  {router['id']:<20} amqp://{router['host']}:{ports['amqp']} (SCRAM-SHA-256)  "
            f"amqps://{router['host']}:{ports['amqps']} (TLS; SCRAM-SHA-256 or PLAIN)"
        )
    lines += [
        "",
        "Address spaces (the AMQP hostname / virtual host; user names are <user>@<space>):",
    ]
    for space in deployment["spaces"]:
        addresses = [
            f"{a['link']} ({a['type']})" for a in deployment["addresses"] if a["space"] == space
        ]
        lines.append(f"  {space}: {', '.join(addresses)}")
    lines += ["", "Users and their password files (mode 0600, on the deployer):"]
    width = max((len(u["identity"]) for u in deployment["users"]), default=0)
    for user in deployment["users"]:
        password = f"{endpoints['secrets']}/{user['secret']}/password"
        lines.append(f"  {user['identity']:<{width}}  {password}")
    lines += [
        "",
        f"CA certificate for clients (--ca): {client_ca(endpoints, deployment)}",
        "",
        *observability.describe_lines(deployment, endpoints),
        "",
        "Try it:",
    ]
    lines += _try_it(endpoints, deployment, build_dir)
    lines += [
        "",
        "Stop it with `make down` (broker data is kept; `enmesh down --purge` removes it).",
    ]
    return "\n".join(lines)


def up(project: Project, *, smoke: bool) -> int:
    print(f"==> bringing up stack {project.stack!r} ({project.inventory})", flush=True)
    changed = project.playbook("site.yml")
    print("==> " + ("no changes" if changed == 0 else f"{changed} change(s) applied"))
    if smoke:
        print("==> smoke check: one message through every address type", flush=True)
        if not run_smoke(project.smoke_stack()):
            raise StackError(
                "the smoke check failed (above); see `enmesh status --stack "
                f"{project.stack}` and the logs (/var/log/enmesh under supervisord, "
                "`journalctl -u 'enmesh-*'` on systemd hosts)"
            )
    print()
    print(describe(project.endpoints(), project.deployment, project.build_dir))
    return 0


def down(project: Project, *, purge: bool) -> int:
    extra = ["-e", "enmesh_teardown_purge=true"] if purge else []
    print(
        f"==> tearing down stack {project.stack!r}" + (" and purging broker data" if purge else "")
    )
    project.playbook("teardown.yml", *extra)
    return 0


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def reachable_routers(host: str, port: int) -> int | None:
    """How many other routers this one reaches (its /metrics); None if it does not answer."""
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return None
    match = re.search(r"^enmesh_router_reachable_routers\{[^}]*\} (\d+)", text, re.MULTILINE)
    return int(match[1]) if match else None


def _management_line(router: dict[str, Any], admin: Administrator | str) -> bool:
    """What the router serves, as its stack administrator reads it through `$management`;
    False if the administrator cannot log in or ask."""
    if isinstance(admin, str):
        print(f"        management: not asked: {admin}")
        return True  # e.g. not root: the secret is unreadable, the router may well be fine
    try:
        found = served(router_url(router), admin)
    except ManagementError as exc:
        print(f"        management: FAILED: {exc}")
        return False
    print(f"        management ({admin.identity}): {found.line()}")
    return True


def status(project: Project) -> int:
    deployment = project.deployment
    healthy = True
    admin = Administrator.of(deployment, Path(deployment["paths"]["secrets"]))
    expected_peers = len(deployment["routers"]) - 1
    for router in deployment["routers"]:
        host, ports = router["host"], router["ports"]
        down_ports = [name for name, port in sorted(ports.items()) if not _listening(host, port)]
        peers = reachable_routers(host, ports["metrics"])
        ok = not down_ports and peers == expected_peers
        healthy &= ok
        detail = f"ports {', '.join(down_ports)} closed" if down_ports else "all ports open"
        mesh = (
            "metrics unreachable" if peers is None else f"{peers}/{expected_peers} peers reachable"
        )
        print(f"  {'up  ' if ok else 'DOWN'}  router {router['id']:<20} {host}  {detail}; {mesh}")
        if "amqp" not in down_ports:
            healthy &= _management_line(router, admin)
    for broker in deployment["brokers"]:
        ports = broker["ports"]
        for host in queue_depth.node_hosts(broker):
            down_ports = [
                name
                for name, port in sorted(ports.items())
                if name != "dist" and not _listening(host, port)
            ]
            healthy &= not down_ports
            detail = f"ports {', '.join(down_ports)} closed" if down_ports else "all ports open"
            state = "DOWN" if down_ports else "up  "
            print(f"  {state}  broker {broker['name']:<20} {host}  {detail}")
    endpoints = project.endpoints() if (project.build_dir / "endpoints.json").is_file() else {}
    for probe in observability.probes(deployment, endpoints):
        healthy &= probe.ok
        print(probe.line())
    return 0 if healthy else 3
