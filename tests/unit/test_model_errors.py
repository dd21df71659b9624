"""Every model error case, each asserting file, line, document, field and message."""

from __future__ import annotations

from pathlib import Path

import pytest

from enmesh.model import ModelInvalidError, load_model, validate_files
from tests.unit.modelkit import BASE_DOCUMENTS, line_of, only, problems, write_model

ADDRESS = """\
apiVersion: enmesh.io/v1
kind: Address
metadata: {{name: {name}}}
spec:
  addressSpace: {space}
  address: {address}
  type: {type}
  plan: {plan}
{extra}"""


def address(
    name: str, address: str, type: str, plan: str, *, space: str = "t1", extra: str = ""
) -> str:
    return ADDRESS.format(
        name=name, space=space, address=address, type=type, plan=plan, extra=extra
    )


USER = """\
apiVersion: enmesh.io/v1
kind: MessagingUser
metadata: {{name: {name}}}
spec:
  addressSpace: {space}
  username: {username}
  authentication:
{authentication}
  authorization:
    - operations: [send]
      addresses: ["*"]
"""
SECRET = "    passwordSecret: {name: s, key: password}"


def user(name: str, username: str = "u", space: str = "t1", authentication: str = SECRET) -> str:
    return USER.format(name=name, username=username, space=space, authentication=authentication)


def test_valid_base_model_has_no_problems(tmp_path: Path) -> None:
    found, _, _ = problems(tmp_path, address("t1.a", "a", "anycast", "plan-anycast"))
    assert found == []


def test_unknown_address_space(tmp_path: Path) -> None:
    found, text, path = problems(
        tmp_path, address("x.a", "a", "anycast", "plan-anycast", space="nowhere")
    )
    p = only(found)
    assert (p.file, p.line, p.document, p.document_name, p.field) == (
        str(path),
        line_of(text, "addressSpace: nowhere"),
        BASE_DOCUMENTS + 1,
        "Address/x.a",
        "spec.addressSpace",
    )
    assert "unknown AddressSpace 'nowhere'" in p.message and "t1" in p.message


def test_unknown_address_plan(tmp_path: Path) -> None:
    found, text, _ = problems(tmp_path, address("t1.a", "a", "anycast", "gold"))
    p = only(found)
    assert (p.line, p.field) == (line_of(text, "plan: gold"), "spec.plan")
    assert "unknown AddressPlan 'gold'" in p.message


def test_unknown_space_plan(tmp_path: Path) -> None:
    extra = (
        "apiVersion: enmesh.io/v1\nkind: AddressSpace\nmetadata: {name: t2}\n"
        "spec: {type: standard, plan: platinum}\n"
    )
    found, text, _ = problems(tmp_path, extra)
    p = only(found)
    assert (p.line, p.document_name, p.field) == (
        line_of(text, "plan: platinum"),
        "AddressSpace/t2",
        "spec.plan",
    )
    assert "unknown AddressSpacePlan 'platinum'" in p.message and "small" in p.message


def test_duplicate_address_in_space(tmp_path: Path) -> None:
    extra = (
        address("t1.a", "a", "anycast", "plan-anycast")
        + "---\n"
        + address("t1.a-again", "a", "queue", "plan-queue")
    )
    found, text, path = problems(tmp_path, extra)
    p = only(found)
    assert (p.line, p.document, p.field) == (
        line_of(text, "address: a", 2),
        BASE_DOCUMENTS + 2,
        "spec.address",
    )
    assert f"first defined at {path}:{line_of(text, 'address: a')}" in p.message


def test_same_address_in_two_spaces_is_fine(tmp_path: Path) -> None:
    extra = (
        "apiVersion: enmesh.io/v1\nkind: AddressSpace\nmetadata: {name: t2}\n"
        "spec: {type: standard, plan: small}\n---\n"
        + address("t1.a", "a", "anycast", "plan-anycast")
        + "---\n"
        + address("t2.a", "a", "anycast", "plan-anycast", space="t2")
    )
    found, _, _ = problems(tmp_path, extra)
    assert found == []


def test_subscription_topic_missing(tmp_path: Path) -> None:
    found, text, _ = problems(
        tmp_path, address("t1.s", "s", "subscription", "plan-sub", extra="  topic: news\n")
    )
    p = only(found)
    assert (p.line, p.field) == (line_of(text, "topic: news"), "spec.topic")
    assert "expected a topic address" in p.message and "'news' does not exist" in p.message


def test_subscription_topic_is_not_a_topic(tmp_path: Path) -> None:
    extra = (
        address("t1.q", "q", "queue", "plan-queue")
        + "---\n"
        + address("t1.s", "s", "subscription", "plan-sub", extra="  topic: q\n")
    )
    found, text, _ = problems(tmp_path, extra)
    p = only(found)
    assert (p.line, p.field) == (line_of(text, "topic: q"), "spec.topic")
    assert "'q' is a queue" in p.message


def test_subscription_without_topic(tmp_path: Path) -> None:
    found, _text, _ = problems(tmp_path, address("t1.s", "s", "subscription", "plan-sub"))
    p = only(found)
    assert p.field == "spec.topic" and "required for subscription" in p.message


def test_deadletter_reference_to_non_deadletter(tmp_path: Path) -> None:
    extra = (
        address("t1.a", "a", "anycast", "plan-anycast")
        + "---\n"
        + address("t1.q", "q", "queue", "plan-queue", extra="  deadLetterAddress: a\n")
    )
    found, text, _ = problems(tmp_path, extra)
    p = only(found)
    assert (p.line, p.document_name, p.field) == (
        line_of(text, "deadLetterAddress: a"),
        "Address/t1.q",
        "spec.deadLetterAddress",
    )
    assert "expected a deadletter address" in p.message and "'a' is a anycast" in p.message


def test_deadletter_reference_to_missing_address(tmp_path: Path) -> None:
    found, text, _ = problems(
        tmp_path, address("t1.q", "q", "queue", "plan-queue", extra="  deadLetterAddress: dlq\n")
    )
    p = only(found)
    assert p.line == line_of(text, "deadLetterAddress: dlq") and "does not exist" in p.message


def test_plan_address_limit_exceeded(tmp_path: Path) -> None:
    extra = "---\n".join(address(f"t1.a{i}", f"a{i}", "anycast", "plan-anycast") for i in range(5))
    found, text, _ = problems(tmp_path, extra)
    p = only(found)
    assert (p.line, p.document_name, p.field) == (
        line_of(text, "spec: {type: standard, plan: small}"),
        "AddressSpace/t1",
        "spec.plan",
    )
    assert "has 5 addresses" in p.message and "at most 4" in p.message


def test_plan_broker_limit_exceeded_by_partitions(tmp_path: Path) -> None:
    found, text, _ = problems(tmp_path, address("t1.q", "q", "queue", "plan-queue-2"))
    p = only(found)
    assert (p.line, p.field) == (line_of(text, "plan: plan-queue-2"), "spec.plan")
    assert "2 brokers" in p.message and "resourceLimits.brokers" in p.message


def test_address_plan_of_wrong_type(tmp_path: Path) -> None:
    found, _text, _ = problems(tmp_path, address("t1.a", "a", "anycast", "plan-queue"))
    p = only(found)
    assert p.field == "spec.plan" and "for queue addresses, not anycast" in p.message


def test_literal_password_refused(tmp_path: Path) -> None:
    found, text, _ = problems(tmp_path, user("t1.u", authentication="    password: hunter2"))
    p = only(found)
    assert (p.line, p.document_name, p.field) == (
        line_of(text, "password: hunter2"),
        "MessagingUser/t1.u",
        "spec.authentication.password",
    )
    assert "literal password is not allowed" in p.message and "passwordSecret" in p.message
    assert "hunter2" not in str(p)  # never echo a secret back


def test_user_in_unknown_space_and_duplicate_username(tmp_path: Path) -> None:
    extra = user("t1.u") + "---\n" + user("t1.u2") + "---\n" + user("t9.u", space="t9")
    found, text, _ = problems(tmp_path, extra)
    assert [(p.document, p.field) for p in found] == [
        (BASE_DOCUMENTS + 2, "spec.username"),
        (BASE_DOCUMENTS + 3, "spec.addressSpace"),
    ]
    assert found[0].line == line_of(text, "username: u", 2)


def test_setting_that_does_not_apply_to_type(tmp_path: Path) -> None:
    found, text, _ = problems(
        tmp_path, address("t1.a", "a", "anycast", "plan-anycast", extra="  ttlSeconds: 5\n")
    )
    p = only(found)
    assert (p.line, p.field) == (line_of(text, "ttlSeconds: 5"), "spec.ttlSeconds")
    assert "does not apply to anycast" in p.message


def test_schema_errors_name_field_and_expectation(tmp_path: Path) -> None:
    found, text, _ = problems(
        tmp_path,
        address("t1.q", "q", "queu", "plan-queue", extra="  maxDeliveries: many\n  colour: red\n"),
    )
    by_field = {p.field: p for p in found}
    assert set(by_field) == {"spec.type", "spec.maxDeliveries", "spec.colour"}
    assert by_field["spec.type"].line == line_of(text, "type: queu")
    assert (
        "'queue'" in by_field["spec.type"].message and "got 'queu'" in by_field["spec.type"].message
    )
    assert "integer" in by_field["spec.maxDeliveries"].message
    assert "unknown field" in by_field["spec.colour"].message
    assert "ttlSeconds" in by_field["spec.colour"].message  # lists what is accepted


def test_missing_required_field_points_at_parent(tmp_path: Path) -> None:
    extra = (
        "apiVersion: enmesh.io/v1\nkind: AddressSpace\nmetadata: {name: t2}\n"
        "spec:\n  type: standard\n"
    )
    found, text, _ = problems(tmp_path, extra)
    p = only(found)
    assert (p.field, p.line) == ("spec.plan", line_of(text, "spec:", text.count("spec:")))
    assert p.message == "required field is missing"


def test_unknown_kind_and_wrong_api_version(tmp_path: Path) -> None:
    extra = "kind: Widget\n---\napiVersion: v2\nkind: Address\n"
    found, text, _ = problems(tmp_path, extra)
    assert [(p.line, p.field) for p in found] == [
        (line_of(text, "kind: Widget"), "kind"),
        (line_of(text, "apiVersion: v2"), "apiVersion"),
    ]
    assert "expected one of: Address, AddressPlan" in found[0].message


def test_duplicate_yaml_key(tmp_path: Path) -> None:
    extra = address("t1.a", "a", "anycast", "plan-anycast", extra="  address: b\n")
    found, text, _ = problems(tmp_path, extra)
    p = only(found)
    assert (p.line, p.field) == (line_of(text, "address: b"), "spec.address")
    assert "duplicate key" in p.message


def test_yaml_syntax_error_is_located(tmp_path: Path) -> None:
    found, text, path = problems(tmp_path, "kind: [unclosed\nmetadata: x\n")
    p = only(found)
    assert p.file == str(path) and p.line >= line_of(text, "kind: [unclosed")
    assert p.message.startswith("YAML syntax error")


def test_duplicate_object_name(tmp_path: Path) -> None:
    extra = (
        address("t1.a", "a", "anycast", "plan-anycast")
        + "---\n"
        + address("t1.a", "b", "anycast", "plan-anycast")
    )
    found, text, _ = problems(tmp_path, extra)
    p = only(found)
    assert (p.field, p.line) == ("metadata.name", line_of(text, "name: t1.a}", 2))


def test_all_problems_reported_at_once_across_files(tmp_path: Path) -> None:
    first, _ = write_model(tmp_path, address("t1.a", "a", "anycast", "gold"), "one.yml")
    second = tmp_path / "two.yml"
    second.write_text(
        address("t1.b", "b", "topic", "plan-topic", space="zz")
        + "---\n"
        + user("t1.u", authentication="    password: x")
    )
    found = validate_files([first, second])
    assert [(Path(p.file).name, p.field) for p in found] == [
        ("one.yml", "spec.plan"),
        ("two.yml", "spec.addressSpace"),
        ("two.yml", "spec.authentication.password"),
    ]
    with pytest.raises(ModelInvalidError) as raised:
        load_model([first, second])
    assert len(raised.value.problems) == 3
    assert str(raised.value).startswith("3 problems in the model")


def test_unreadable_file(tmp_path: Path) -> None:
    p = only(validate_files([tmp_path / "missing.yml"]))
    assert "cannot read file" in p.message and p.file.endswith("missing.yml")
