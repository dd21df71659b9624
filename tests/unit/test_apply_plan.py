"""The plan of `enmesh apply` (enmesh.control.plan/output), from fixture files: what it
adds, changes, replaces and removes per router, broker and user, and what it refuses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from enmesh.compile import compile_stack_file
from enmesh.control.apply import StackPlan
from enmesh.control.output import render
from enmesh.control.plan import (
    Action,
    BrokerPlan,
    Change,
    broker_plan,
    policy_changes,
    router_plan,
    user_changes,
)
from enmesh.deploy.sasldb import ensure_sasldb, installed_users
from enmesh.router.config_model import RouterConfigError

FIXTURES = Path(__file__).parent / "apply_fixtures"
ROOT = Path(__file__).resolve().parents[2]


def _text(name: str) -> str:
    return (FIXTURES / name).read_text()


def _json(name: str) -> Any:
    return json.loads(_text(name))


def _by_key(changes: list[Change] | tuple[Change, ...]) -> dict[tuple[str, str], Change]:
    return {(c.kind, c.key): c for c in changes}


def test_router_plan_lists_each_entity_added_changed_and_removed() -> None:
    plan = router_plan("r0", _text("router-before.conf"), _text("router-after.conf"), [])
    changes = _by_key(plan.changes)
    assert set(changes) == {
        ("address", "shop/orders"),
        ("address", "iot/telemetry"),
        ("address", "iot/events"),
        ("autoLink", "iot/events in via broker-0"),
        ("listener", "amqp"),
        ("connector", "broker-0"),
    }
    assert changes[("address", "shop/orders")].action is Action.ADD
    assert changes[("address", "iot/events")].action is Action.REMOVE
    assert changes[("autoLink", "iot/events in via broker-0")].action is Action.REMOVE
    telemetry = changes[("address", "iot/telemetry")]
    assert telemetry.action is Action.CHANGE
    assert telemetry.details == ("distribution: balanced -> multicast",)
    assert changes[("listener", "amqp")].details == ("port: 5672 -> 5682",)


def test_a_changed_secret_reference_is_never_printed() -> None:
    plan = router_plan("r0", _text("router-before.conf"), _text("router-after.conf"), [])
    connector = _by_key(plan.changes)[("connector", "broker-0")]
    assert connector.details == ("saslPassword: (secret) changed",)
    assert "secrets/" not in repr(plan)


def test_the_same_config_plans_nothing_and_a_new_router_adds_everything() -> None:
    text = _text("router-after.conf")
    assert router_plan("r0", text, text, []).changes == ()
    fresh = router_plan("r9", None, text, [])
    assert {c.action for c in fresh.changes} == {Action.ADD}


def test_a_broken_installed_config_is_an_error_with_file_and_line() -> None:
    with pytest.raises(RouterConfigError, match=r"installed r0\.conf:2: "):
        router_plan("r0", "router {\n    id r0\n}\n", _text("router-after.conf"), [])


def test_policy_changes_per_vhost_group() -> None:
    changes = _by_key(
        policy_changes(
            {"iot.json": _text("policy-before.json")}, {"iot.json": _text("policy-after.json")}
        )
    )
    assert changes[("vhost group", "iot/new")].action is Action.ADD
    assert changes[("vhost group", "iot/old")].action is Action.REMOVE
    device = changes[("vhost group", "iot/device")]
    assert device.details == ("targets: telemetry -> telemetry, events",)
    assert ("vhost", "iot") not in changes


def _broker() -> BrokerPlan:
    depths = {("enmesh", "iot.old"): 7, ("enmesh", "iot.commands"): 2, ("gone", "q"): 0}
    return broker_plan(
        "broker-0",
        _json("broker-exported.json"),
        _json("broker-desired.json"),
        depths,
        managed_vhosts=["enmesh", "gone"],
    )


def test_broker_plan_adds_removes_and_replaces_queues() -> None:
    plan = _broker()
    changes = _by_key(plan.changes)
    assert changes[("queue", "enmesh/shop.orders")].action is Action.ADD
    old = changes[("queue", "enmesh/iot.old")]
    assert old.action is Action.REMOVE and old.details == ("holds 7 message(s)",)
    commands = changes[("queue", "enmesh/iot.commands")]
    assert commands.action is Action.REPLACE
    assert (
        commands.details[0].startswith("arguments: ") and "holds 2 message(s)" in commands.details
    )
    assert changes[("binding", "enmesh/iot.alerts -> queue iot.audit []")].action is Action.REMOVE
    assert changes[("vhost", "gone")].action is Action.REMOVE
    assert changes[("queue", "gone/q")].action is Action.REMOVE
    assert sorted(plan.queues_losing_messages()) == [
        (("enmesh", "iot.commands"), 2),
        (("enmesh", "iot.old"), 7),
    ]


def test_broker_plan_ignores_what_rabbitmq_owns_and_what_it_writes_differently() -> None:
    keys = {key for _, key in _by_key(_broker().changes)}
    assert not any("amq." in key or "mqtt-" in key or key.startswith("/") for key in keys)
    assert "enmesh/iot.events" not in keys  # same queue
    assert "enmesh/iot.alerts" not in keys  # `internal: false` omitted by the export
    assert not any(key.startswith("enmesh/ -> ") for key in keys)  # default exchange
    assert "enmesh/iot-queues" not in keys


def test_nothing_to_import_when_the_plan_only_removes() -> None:
    desired = _json("broker-exported.json")
    plan = broker_plan("broker-0", desired, {**desired, "queues": desired["queues"][:2]}, {})
    assert plan.changes and not plan.imports


def test_user_changes_never_show_a_password() -> None:
    changes = user_changes(
        {"a@iot": "pw-a", "b@iot": "new-b", "c@iot": "pw-c"},
        ["a@iot", "b@iot", "gone@iot"],
        lambda identity, password: identity != "b@iot",
    )
    assert [(c.action, c.key, c.details) for c in changes] == [
        (Action.CHANGE, "b@iot", ("password changed",)),
        (Action.ADD, "c@iot", ()),
        (Action.REMOVE, "gone@iot", ()),
    ]
    assert "new-b" not in repr(changes)


def test_the_sasl_database_records_whose_password_changed(tmp_path: Path) -> None:
    path = tmp_path / "enmesh.sasldb"
    ensure_sasldb(path, {"a@iot": "one", "b@iot": "two"})
    installed = installed_users(path)
    assert installed.identities == {"a@iot", "b@iot"}
    assert installed.same_password("a@iot", "one") is True
    assert installed.same_password("a@iot", "two") is False
    assert installed.same_password("c@iot", "x") is None
    assert "one" not in (tmp_path / "enmesh.sasldb.users.json").read_text()


def _stack_plan(brokers: list[BrokerPlan]) -> StackPlan:
    return StackPlan("t", [], brokers, [], {}, {})


def test_refusals_name_each_queue_and_its_messages_unless_forced() -> None:
    plan = _stack_plan([_broker()])
    refusals = plan.refusals([])
    assert refusals == [
        "queue iot.commands (vhost enmesh, broker broker-0) holds 2 message(s); "
        "apply deletes it only with --force iot.commands",
        "queue iot.old (vhost enmesh, broker broker-0) holds 7 message(s); "
        "apply deletes it only with --force iot.old",
    ]
    assert len(plan.refusals(["enmesh/iot.old"])) == 1
    assert plan.refusals(["iot.old", "iot.commands"]) == []


def test_output_groups_routers_with_the_same_changes_and_counts() -> None:
    same = router_plan("a", _text("router-before.conf"), _text("router-after.conf"), [])
    other = router_plan("c", _text("router-after.conf"), _text("router-after.conf"), [])
    twin = router_plan("b", _text("router-before.conf"), _text("router-after.conf"), [])
    text = render("t", [same, twin, other], [_broker()], [Change(Action.ADD, "user", "c@iot")])
    assert "routers a, b:\n    - address iot/events\n" in text
    assert "    + address shop/orders\n" in text
    assert "router c" not in text
    assert "        distribution: balanced -> multicast\n" in text
    assert "broker broker-0:\n" in text and "  -/+ queue enmesh/iot.commands\n" in text
    assert "users:\n    + user c@iot" in text
    assert text.rstrip().endswith("Plan: 4 to add, 6 to change, 8 to remove, 1 to replace.")
    assert "no changes" in render("t", [other], [], [])


def test_the_compiled_sample_stack_plans_nothing_against_itself() -> None:
    _, artefacts = compile_stack_file(ROOT / "stacks" / "local.stack.yml")
    conf = artefacts.files["routers/local-router-0.conf"]
    policies = {k: v for k, v in artefacts.files.items() if k.startswith("auth/policies/")}
    assert (
        router_plan("local-router-0", conf, conf, policy_changes(policies, policies)).changes == ()
    )
    definitions = json.loads(artefacts.files["brokers/broker-0.definitions.json"])
    assert broker_plan("broker-0", definitions, definitions, {}).changes == []
