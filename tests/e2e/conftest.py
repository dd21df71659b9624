"""End-to-end checks of a running stack (testinfra + real AMQP clients).

Run by molecule's verifier and by playbooks/verify.yml, against the stack named by
ENMESH_STACK (default `local`) as the deployer recorded it in build/<stack>/. Not part
of the plain `pytest` run: there is no stack to check there (see pyproject testpaths).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from enmesh.deploy.smoke import Stack

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def build_dir() -> Path:
    return ROOT / "build" / os.environ.get("ENMESH_STACK", "local")


@pytest.fixture(scope="session")
def deployment(build_dir: Path) -> dict[str, Any]:
    return dict(json.loads((build_dir / "deploy.json").read_text()))


@pytest.fixture(scope="session")
def endpoints(build_dir: Path) -> dict[str, Any]:
    return dict(json.loads((build_dir / "endpoints.json").read_text()))


@pytest.fixture(scope="session")
def stack(deployment: dict[str, Any], endpoints: dict[str, Any], build_dir: Path) -> Stack:
    return Stack(deployment, build_dir, Path(endpoints["secrets"]), Path(endpoints["ca"]))
