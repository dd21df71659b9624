"""docs/roles.md's role-variable tables match every role's meta/argument_specs.yml."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_role_variables_page_is_generated_from_the_argument_specs() -> None:
    result = subprocess.run(
        [sys.executable, "scripts/role_docs.py", "--check"],
        cwd=ROOT,
        check=False,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


def test_every_default_is_documented() -> None:
    for defaults in ROOT.glob("roles/*/defaults/main.yml"):
        role = defaults.parts[-3]
        names = set(yaml.safe_load(defaults.read_text()) or {})
        spec = yaml.safe_load((defaults.parents[1] / "meta" / "argument_specs.yml").read_text())
        documented = set(spec["argument_specs"]["main"]["options"])
        assert names <= documented, f"{role}: undocumented {sorted(names - documented)}"
