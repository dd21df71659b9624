"""The model side of a migration plan, from two deploy descriptions (no broker needed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from enmesh.migrate.ends import MigrateError, StackEnd, end_from_deployment
from enmesh.migrate.plan import make_plan
from enmesh.migrate.shovel import move_stored


def end(tmp_path: Path, name: str, addresses: list[dict[str, str]], users: list[str]) -> StackEnd:
    config = tmp_path / name
    (config / "auth").mkdir(parents=True)
    (config / "auth" / "users.json").write_text(
        json.dumps({"messagingUsers": [{"identity": u} for u in users]})
    )
    deployment: dict[str, Any] = {
        "addresses": addresses,
        "brokers": [],
        "ca": str(config / "ca.crt"),
        "paths": {"config": str(config)},
    }
    return end_from_deployment(name, deployment, {})


def test_plan_reports_tenants_addresses_users_and_conflicts(tmp_path: Path) -> None:
    source = end(
        tmp_path,
        "source",
        [
            {"space": "iot", "address": "events", "type": "queue"},
            {"space": "shop", "address": "orders", "type": "anycast"},
        ],
        ["device@iot", "clerk@shop"],
    )
    target = end(
        tmp_path,
        "target",
        [
            {"space": "iot", "address": "events", "type": "anycast"},
            {"space": "lab", "address": "probe", "type": "queue"},
        ],
        ["device@iot"],
    )
    plan = make_plan(source, target)
    assert plan.tenants == {"both": ["iot"], "source": ["shop"], "target": ["lab"]}
    assert plan.conflicts == ["address iot/events is queue on source but anycast on target"]
    assert plan.users_missing_on_target == ["clerk@shop"]
    assert {a["address"]: a["on"] for a in plan.addresses} == {
        "iot/events": "both",
        "lab/probe": "target",
        "shop/orders": "source",
    }
    assert "conflict: address iot/events" in plan.text()
    with pytest.raises(MigrateError, match=r"models conflict.*iot/events.*nothing moved"):
        move_stored(source, target, progress=lambda _: None)


def test_missing_users_file_is_named(tmp_path: Path) -> None:
    deployment: dict[str, Any] = {
        "addresses": [],
        "brokers": [],
        "ca": "/nope/ca.crt",
        "paths": {"config": "/nope"},
    }
    with pytest.raises(MigrateError, match=r"stack 'x': cannot read /nope/auth/users\.json"):
        end_from_deployment("x", deployment, {}).users()
