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
import yaml

# The deployer's view of the stack (build/$ENMESH_STACK): the same fixtures as tests/e2e.
from tests.e2e.conftest import build_dir, deployment, endpoints, stack
from tests.support.sites import SiteSpec

__all__ = ["build_dir", "deployment", "endpoints", "stack"]

ROOT = Path(__file__).resolve().parents[2]
STACK = os.environ.get("ENMESH_STACK", "site")
INVENTORY = ROOT / "stacks" / f"{STACK}.inventory.yml"


@pytest.fixture(scope="session")
def site() -> SiteSpec:
    return SiteSpec(STACK, 5)


def _group(name: str) -> dict[str, Any]:
    """testinfra hosts of an inventory group by address (ansible backend: the
    inventory's SSH settings)."""
    found = testinfra.get_hosts([f"ansible://{name}"], ansible_inventory=str(INVENTORY))
    return {h.ansible.get_variables()["enmesh_host_address"]: h for h in found}


@pytest.fixture(scope="session")
def hosts() -> dict[str, Any]:
    """The hosts of routers and brokers (group enmesh)."""
    return _group("enmesh")


@pytest.fixture(scope="session")
def spark_hosts() -> dict[str, Any]:
    """The hosts of the telemetry pipeline (group spark)."""
    return _group("spark")


@pytest.fixture(scope="session")
def spark_master(spark_hosts: dict[str, Any]) -> str:
    """Address of the host running the Spark master and the job: the group's first (the
    spark role's enmesh_spark_master_host), in the inventory's order."""
    group = yaml.safe_load(INVENTORY.read_text())["all"]["children"]["spark"]["hosts"]
    address: str = next(iter(group.values()))["enmesh_host_address"]
    assert address in spark_hosts
    return address


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The rolling upgrade runs after the other checks (it needs the whole site their faults
    leave behind, and installs another build), and the migration to the site last: its
    prepare runs site.yml with the source's passwords, and the other checks expect the
    site as molecule converged it."""
    late = {"test_upgrade.py": 1, "test_migrate.py": 2}
    items.sort(key=lambda item: late.get(item.path.name, 0))
