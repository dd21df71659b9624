"""A site as a migration's target, read from its Ansible inventory (no host needed: the
migration itself runs in tests/sites/test_migrate.py against the molecule site)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from enmesh.control.brokers import Rabbitmqctl
from enmesh.migrate.ends import MigrateError
from enmesh.migrate.site import load_site, site_end

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOKS = ROOT / "playbooks"


def test_the_site_inventory_names_the_deployers_files_and_ssh_to_each_host() -> None:
    site = load_site(ROOT / "stacks" / "site.inventory.yml", PLAYBOOKS)
    assert site.stack_file == ROOT / "stacks" / "site.stack.yml"
    assert site.build_dir == ROOT / "build" / "site"
    assert site.ca == Path("/var/lib/enmesh-sites/site/deployer/pki/ca.crt")
    assert [h.address for h in site.hosts] == [f"192.168.251.{n}" for n in (11, 12, 13)]
    assert site.host("192.168.251.12").ssh == (
        "ssh", "-o", "BatchMode=yes", "-i", "/var/lib/enmesh-sites/site/id_ed25519",
        "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
        "root@192.168.251.12",
    )  # fmt: skip


def test_become_runs_the_command_under_sudo(tmp_path: Path) -> None:
    inventory = tmp_path / "x.inventory.yml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "vars": {
                        "enmesh_stack_file": "{{ playbook_dir }}/../stacks/x.stack.yml",
                        "enmesh_build_dir": "/srv/build/x",
                        "enmesh_secrets_source_dir": "/srv/x/secrets",
                        "enmesh_tls_pki_dir": "/srv/x/pki",
                        "ansible_user": "deploy",
                        "ansible_become": True,
                    },
                    "children": {"enmesh": {"hosts": {"r1": {"enmesh_host_address": "10.0.0.1"}}}},
                }
            }
        )
    )
    site = load_site(inventory, PLAYBOOKS)
    assert site.stack_file == ROOT / "stacks" / "x.stack.yml"
    assert site.host("10.0.0.1").ssh[-4:] == ("deploy@r1", "sudo", "-n", "--")
    with pytest.raises(MigrateError, match="never rendered on this deployer"):
        site_end(site)


def test_an_inventory_that_is_not_a_sites_is_refused(tmp_path: Path) -> None:
    inventory = tmp_path / "other.inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"a": {}}}}))
    with pytest.raises(MigrateError, match="no hosts in group enmesh"):
        load_site(inventory, PLAYBOOKS)
    with pytest.raises(MigrateError, match="no inventory at"):
        load_site(tmp_path / "missing.yml", PLAYBOOKS)


def test_a_remote_rabbitmqctl_quotes_every_word_for_the_hosts_shell() -> None:
    ctl = Rabbitmqctl("broker-0", ("rabbitmqctl",), via=("sh", "-c"))
    # `sh -c CMD` stands for ssh: one string, run by the remote shell.
    words = ctl.command("set_permissions", "-p", "iot space", "u", ".*", "$(false)", "a'b")
    assert words[:2] == ["sh", "-c"] and len(words) == 3
    echoed = subprocess.run(
        ["sh", "-c", words[2].replace("rabbitmqctl", "printf '%s\\n'", 1)],
        capture_output=True, text=True, check=True,
    ).stdout.splitlines()  # fmt: skip
    assert echoed == ["-q", "set_permissions", "-p", "iot space", "u", ".*", "$(false)", "a'b"]
