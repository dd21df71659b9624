"""Checks of a deployed site (molecule scenario `site`): testinfra over SSH on every host,
real AMQP clients from this machine through the site's bridge, and host faults.

Run by molecule's verifier against the hosts of stacks/site.inventory.yml; needs the site
created by `python -m tests.support.sites create` and converged with playbooks/site.yml.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import testinfra  # type: ignore[import-untyped]

# The deployer's view of the stack (build/$ENMESH_STACK): the same fixtures as tests/e2e.
from tests.e2e.conftest import build_dir, deployment, endpoints, stack
from tests.support.sites import SiteSpec

__all__ = ["build_dir", "deployment", "endpoints", "stack"]

ROOT = Path(__file__).resolve().parents[2]
STACK = os.environ.get("ENMESH_STACK", "site")
INVENTORY = ROOT / "stacks" / f"{STACK}.inventory.yml"


@pytest.fixture(scope="session")
def site() -> SiteSpec:
    return SiteSpec(STACK, 3)


@pytest.fixture(scope="session")
def hosts() -> dict[str, Any]:
    """testinfra hosts by address (ansible backend: the inventory's SSH settings)."""
    found = testinfra.get_hosts(["ansible://enmesh"], ansible_inventory=str(INVENTORY))
    return {h.ansible.get_variables()["enmesh_host_address"]: h for h in found}
