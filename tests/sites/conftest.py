"""Checks of a deployed site (molecule scenario `site`): testinfra over SSH on every host,
real AMQP clients from this machine through the site's bridge, and host faults.

Run by molecule's verifier against the hosts of stacks/site.inventory.yml; needs the site
created by `python -m tests.support.sites create` and converged with playbooks/site.yml.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import testinfra  # type: ignore[import-untyped]

from enmesh.deploy.smoke import Stack
from tests.support.sites import SiteSpec

ROOT = Path(__file__).resolve().parents[2]
STACK = os.environ.get("ENMESH_STACK", "site")
INVENTORY = ROOT / "stacks" / f"{STACK}.inventory.yml"


@pytest.fixture(scope="session")
def site() -> SiteSpec:
    return SiteSpec(STACK, 3)


@pytest.fixture(scope="session")
def build_dir() -> Path:
    return ROOT / "build" / STACK


@pytest.fixture(scope="session")
def deployment(build_dir: Path) -> dict[str, Any]:
    return dict(json.loads((build_dir / "deploy.json").read_text()))


@pytest.fixture(scope="session")
def endpoints(build_dir: Path) -> dict[str, Any]:
    return dict(json.loads((build_dir / "endpoints.json").read_text()))


@pytest.fixture(scope="session")
def stack(deployment: dict[str, Any], endpoints: dict[str, Any], build_dir: Path) -> Stack:
    return Stack(deployment, build_dir, Path(endpoints["secrets"]), Path(endpoints["ca"]))


@pytest.fixture(scope="session")
def hosts() -> dict[str, Any]:
    """testinfra hosts by address (ansible backend: the inventory's SSH settings)."""
    found = testinfra.get_hosts(["ansible://enmesh"], ansible_inventory=str(INVENTORY))
    return {h.ansible.get_variables()["enmesh_host_address"]: h for h in found}
