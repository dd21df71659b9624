"""`make up`'s Ansible output shows a wait as a wait (issue 29, item 9): an until loop's
retries printed `FAILED - RETRYING` with Ansible's default callback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = """\
- name: Wait
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Wait for the third try
      ansible.builtin.command: "true"
      register: wait_result
      until: wait_result.attempts | default(1) >= 3
      retries: 5
      delay: 0
      changed_when: false
"""


def test_a_wait_says_waiting_not_failed(tmp_path: Path) -> None:
    playbook = tmp_path / "wait.yml"
    playbook.write_text(PLAYBOOK)
    result = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i", "localhost,",
         "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}", str(playbook)],
        cwd=tmp_path,  # the project's ansible.cfg finds its plugin from anywhere
        env=os.environ | {"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "FAILED" not in result.stdout
    assert "waiting: [localhost]: Wait for the third try (try 1 of 6)" in result.stdout
    assert "try 2 of 6" not in result.stdout  # one line per wait, not one per try
    assert "ok=1" in result.stdout  # the rest of the default output is unchanged
