"""Run playbooks/site.yml (or a per-layer playbook) against the site from a test, and
read its recap."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.sites.conftest import INVENTORY, ROOT

ANSI = re.compile(r"\x1b\[[0-9;]*m")
SLOWEST_TASKS = 25  # the run's output ends with them (plugins/callback/enmesh.py)
RECAP = re.compile(r"^(\S+)\s*:\s*ok=\d+\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def run_playbook(
    tmp_path: Path,
    extra: dict[str, Any] | None = None,
    extra_vars: dict[str, str] | None = None,
    playbook: str = "site.yml",
) -> tuple[int, str]:
    """Run playbooks/site.yml, or the per-layer `playbook`, against the site (plus an extra
    inventory, if given)."""
    sources = ["-i", str(INVENTORY)]
    if extra is not None:
        path = tmp_path / "extra.inventory.yml"
        path.write_text(yaml.safe_dump(extra))
        sources += ["-i", str(path)]
    for name, value in (extra_vars or {}).items():
        sources += ["-e", f"{name}={value}"]
    venv = ROOT / ".venv/bin"
    done = subprocess.run(
        [str(venv / "ansible-playbook"), *sources, str(ROOT / "playbooks" / playbook)],
        capture_output=True,
        text=True,
        timeout=2400,  # a guard against a hung run, not a speed target
        check=False,
        cwd=ROOT,
        env=os.environ
        | {
            "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
            "PATH": f"{venv}:{os.environ['PATH']}",
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_FORCE_COLOR": "0",  # molecule's verifier sets it
            "ENMESH_TASK_TIMES": str(SLOWEST_TASKS),
        },
    )
    return done.returncode, done.stdout + done.stderr


def assert_untouched(output: str, hosts: dict[str, Any]) -> dict[str, str]:
    """The recap's line of each site host: none may have changed."""
    recap = {m[1]: m[0] for m in RECAP.finditer(ANSI.sub("", output))}
    names = {h.ansible.get_variables()["inventory_hostname"] for h in hosts.values()}
    assert names <= set(recap), f"no recap for {names - set(recap)}: {output[-2000:]}"
    changed = {name: recap[name] for name in names if " changed=0 " not in recap[name]}
    assert not changed, f"hosts changed by a run that should have stopped: {changed}"
    return recap


def slowest_tasks(output: str) -> str:
    """The run's closing list of its slowest tasks (see SLOWEST_TASKS)."""
    start = output.rfind("slowest ")
    return output[start:].strip() if start >= 0 else ""
