"""A site of hosts as the target of a migration, reached as its playbook reaches it.

The site's Ansible inventory names everything migrate needs: the stack file, the
deployer's build directory (the rendered `deploy.json` and files), the deployer's secrets
and CA, and how to reach each host over SSH. Migrate changes a site only on the deployer
(its runtime part, its secrets) and then runs the site's playbook, which is a site's
`enmesh apply`; it reads and commands the brokers with `rabbitmqctl` on a broker host over
SSH, and reaches the routers' metrics and listeners at the site's addresses.
"""

from __future__ import annotations

import functools
import shlex
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from enmesh.control.brokers import Rabbitmqctl
from enmesh.control.target import read_deployment
from enmesh.migrate.ends import MigrateError, StackEnd, end_from_deployment

PLAYBOOK = "site.yml"
RABBITMQCTL = ("rabbitmqctl",)  # on the broker host's PATH (Debian's package)
_TAIL = 40  # lines of a failed playbook's output in the error
_READ = (  # the inventory variables migrate uses: the first four are required
    "enmesh_stack_file",
    "enmesh_build_dir",
    "enmesh_secrets_source_dir",
    "enmesh_tls_pki_dir",
    "enmesh_host_address",
    "ansible_host",
    "ansible_port",
    "ansible_user",
    "ansible_become",
    "ansible_ssh_private_key_file",
    "ansible_ssh_common_args",
)


@dataclass(frozen=True)
class SiteHost:
    name: str  # in the inventory
    address: str  # the stack file's address of the host (enmesh_host_address)
    ssh: tuple[str, ...]  # runs one shell command on the host


@dataclass(frozen=True)
class Site:
    inventory: Path
    playbooks: Path  # the project's playbooks directory
    stack_file: Path
    build_dir: Path  # on the deployer: deploy.json and the rendered files
    secrets_dir: Path  # on the deployer: <secret>/<key>, the hosts get copies
    pki_dir: Path  # on the deployer: the site's CA (ca.crt, ca.key)
    hosts: tuple[SiteHost, ...]

    @property
    def ca(self) -> Path:
        return self.pki_dir / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.pki_dir / "ca.key"

    def host(self, address: str) -> SiteHost:
        for host in self.hosts:
            if address in (host.address, host.name):
                return host
        raise MigrateError(f"inventory {self.inventory}: no host with address {address}")

    def deployment(self) -> dict[str, Any]:
        path = self.build_dir / "deploy.json"
        found = read_deployment(path)
        if found is None:
            raise MigrateError(
                f"the site of {self.inventory} was never rendered on this deployer ({path} "
                f"is missing): run `ansible-playbook -i {self.inventory} "
                f"{self.playbooks / PLAYBOOK}` first"
            )
        return found


def _ssh(variables: dict[str, Any], name: str) -> tuple[str, ...]:
    """ssh to the host as Ansible's ssh connection would (its user, key, port and common
    arguments); `sudo -n` when the inventory has Ansible become root there."""
    argv = ["ssh", "-o", "BatchMode=yes"]
    if variables.get("ansible_ssh_private_key_file"):
        argv += ["-i", str(variables["ansible_ssh_private_key_file"])]
    if variables.get("ansible_port"):
        argv += ["-p", str(variables["ansible_port"])]
    argv += shlex.split(str(variables.get("ansible_ssh_common_args") or ""))
    address = str(variables.get("ansible_host") or name)
    user = variables.get("ansible_user")
    argv.append(f"{user}@{address}" if user else address)
    if variables.get("ansible_become"):
        argv += ["sudo", "-n", "--"]
    return tuple(argv)


@functools.cache
def _ansible_plugins() -> None:
    """Ansible's lookups (env, file) as ansible-playbook finds them; once per process."""
    from ansible.plugins.loader import init_plugin_loader  # type: ignore[import-untyped]  # noqa: PLC0415

    init_plugin_loader()


def load_site(inventory: Path, playbooks: Path) -> Site:
    """The site as its inventory describes it, its variables templated as Ansible would
    for a play of `playbooks` (`playbook_dir`, environment lookups)."""
    # Ansible's own inventory and templating: the inventory may use groups, group_vars
    # files and Jinja expressions, which only Ansible reads exactly as a play would.
    from ansible.inventory.manager import InventoryManager  # type: ignore[import-untyped]  # noqa: PLC0415
    from ansible.parsing.dataloader import DataLoader  # type: ignore[import-untyped]  # noqa: PLC0415
    from ansible.template import Templar  # type: ignore[import-untyped]  # noqa: PLC0415
    from ansible.vars.manager import VariableManager  # type: ignore[import-untyped]  # noqa: PLC0415

    if not inventory.is_file():
        raise MigrateError(f"no inventory at {inventory}")
    _ansible_plugins()
    loader = DataLoader()
    manager = InventoryManager(loader=loader, sources=[str(inventory)])
    variables = VariableManager(loader=loader, inventory=manager)
    hosts = []
    found: dict[str, Any] = {}
    for host in sorted(manager.get_hosts(pattern="enmesh"), key=lambda h: h.name):
        known = {**variables.get_vars(host=host), "playbook_dir": str(playbooks)}
        templar = Templar(loader=loader, variables=known)
        found = {name: templar.template(known[name]) for name in _READ if name in known}
        address = str(found.get("enmesh_host_address") or found.get("ansible_host") or host.name)
        hosts.append(SiteHost(host.name, address, _ssh(found, host.name)))
    needed = _READ[:4]
    lacking = [name for name in needed if not found.get(name)]
    if not hosts or lacking:
        raise MigrateError(
            f"inventory {inventory} is not a site's: "
            + (f"it does not set {', '.join(lacking)}" if hosts else "no hosts in group enmesh")
        )
    return Site(
        inventory=inventory,
        playbooks=playbooks,
        stack_file=Path(found["enmesh_stack_file"]).resolve(),
        build_dir=Path(found["enmesh_build_dir"]).resolve(),
        secrets_dir=Path(found["enmesh_secrets_source_dir"]),
        pki_dir=Path(found["enmesh_tls_pki_dir"]),
        hosts=tuple(hosts),
    )


def site_end(site: Site) -> StackEnd:
    """The site as one side of a migration: each broker through `rabbitmqctl` on its
    (first) host, the CA and the rendered files as the deployer keeps them."""
    deployment = site.deployment()
    ctls = {
        b["name"]: Rabbitmqctl(b["name"], RABBITMQCTL, via=site.host(b["host"]).ssh)
        for b in deployment.get("brokers", [])
    }
    return end_from_deployment(
        str(deployment["stack"]), deployment, ctls, ca=site.ca, config_dir=site.build_dir
    )


def _ansible_playbook() -> str:
    beside = Path(sys.executable).with_name("ansible-playbook")
    return str(beside) if beside.exists() else "ansible-playbook"


def apply_site(site: Site, echo: Callable[[str], None] = print) -> None:
    """Run the site's playbook: what `enmesh apply` is on one host, per host (a live
    reload; only what changed restarts). MigrateError with its last lines if it fails."""
    command = [_ansible_playbook(), "-i", str(site.inventory), str(site.playbooks / PLAYBOOK)]
    echo(f"applying the site: {shlex.join(command)}")
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        cwd=site.playbooks.parent,
        check=False,
    )
    lines = result.stdout.splitlines()
    if result.returncode != 0:
        tail = "\n".join([*lines[-_TAIL:], *result.stderr.splitlines()[-5:]])
        raise MigrateError(f"the site's playbook failed ({result.returncode}):\n{tail}")
    echo("\n".join(line for line in lines if " : ok=" in line))
