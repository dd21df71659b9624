"""What the compiled artefacts mean, checked independently of the goldens."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from enmesh.compile import Artefacts, CompileError, compile_model, compile_stack_file, load_stack
from enmesh.compile.placement import rank
from enmesh.model import load_model

ROOT = Path(__file__).resolve().parents[2]
LOCAL = ROOT / "stacks" / "local.stack.yml"
MULTI = ROOT / "tests" / "fixtures" / "multi.stack.yml"


def entities(conf: str, entity_type: str) -> list[dict[str, str]]:
    """Parse the flat attributes of every `entity_type { ... }` block."""
    found = []
    for block in re.findall(rf"^{entity_type} {{\n(.*?)^}}", conf, flags=re.S | re.M):
        attrs = {}
        for line in block.splitlines():
            match = re.match(r"^    (\w+): (.*)$", line)
            if match:
                attrs[match[1]] = match[2]
        found.append(attrs)
    return found


@pytest.fixture(scope="module")
def local() -> dict[str, str]:
    return compile_stack_file(LOCAL)[1].files


@pytest.fixture(scope="module")
def multi() -> dict[str, str]:
    return compile_stack_file(MULTI)[1].files


def test_address_types_compile_per_design(local: dict[str, str]) -> None:
    conf = local["routers/local-router-0.conf"]
    addresses = {a["prefix"]: a for a in entities(conf, "address")}
    assert addresses["iot/telemetry"] == {"prefix": "iot/telemetry", "distribution": "balanced"}
    assert addresses["iot/broadcast"]["distribution"] == "multicast"
    assert addresses["iot/events"]["waypoint"] == "true"
    auto = {(a["address"], a["direction"]) for a in entities(conf, "autoLink")}
    assert {
        ("iot/events", "in"),
        ("iot/events", "out"),
        ("iot/commands", "in"),
        ("iot/commands", "out"),
        ("iot/dlq", "in"),
    } <= auto
    assert ("iot/dlq", "out") not in auto  # dead letters only come out of the broker
    routes = {
        (r["prefix"], r["direction"]): r["addExternalPrefix"] for r in entities(conf, "linkRoute")
    }
    assert routes[("iot/alerts", "out")] == "/exchange/iot.alerts/iot.alerts"  # a routing key
    assert routes[("iot/alerts", "in")] == "/exchange/iot.alerts"
    # qdrouterd and skupper-router cut attribute values at `#`: never emit one.
    assert not any("#" in line for line in conf.splitlines() if not line.startswith("#"))
    assert routes[("iot/alerts::audit", "in")] == "/amq/queue/iot.audit"


def test_tenants_are_separated_by_prefix_and_vhost(local: dict[str, str]) -> None:
    conf = local["routers/local-router-0.conf"]
    prefixes = [a["prefix"] for a in entities(conf, "address")]
    assert "iot/telemetry" in prefixes and "acme/telemetry" in prefixes
    assert all(
        lst["multiTenant"] == "true"
        for lst in entities(conf, "listener")
        if lst["name"] in ("amqp", "amqps")
    )
    iot = json.loads(local["auth/policies/iot.json"])[0][1]
    acme = json.loads(local["auth/policies/acme.json"])[0][1]
    assert (iot["hostname"], acme["hostname"]) == ("iot", "acme")
    assert iot["allowUnknownUser"] is False
    assert set(iot["groups"]) == {"device", "backend"} and set(acme["groups"]) == {"app"}


def test_device_user_rights_match_the_model(local: dict[str, str]) -> None:
    device = json.loads(local["auth/policies/iot.json"])[0][1]["groups"]["device"]
    assert device["users"] == "device@iot"
    assert device["targets"] == "events, readings, telemetry, _dynamic.*"
    assert device["sources"] == "broadcast, commands"
    backend = json.loads(local["auth/policies/iot.json"])[0][1]["groups"]["backend"]
    assert "alerts::audit" in backend["sources"]  # subscriptions are read as topic::sub
    assert "$management" in backend["sources"] and "$management" not in device["sources"]


def test_users_who_send_may_reply_to_dynamic_addresses(
    local: dict[str, str], multi: dict[str, str]
) -> None:
    """Request/response: the reply goes to the requester's `_dynamic.*` address."""
    groups = [
        group
        for artefacts in (local, multi)
        for name, text in artefacts.items()
        if name.startswith("auth/policies/")
        for group in json.loads(text)[0][1]["groups"].values()
        if group["targets"] != "*"
    ]
    assert groups
    for group in groups:
        targets = [t.strip() for t in group["targets"].split(",") if t.strip()]
        sends = [t for t in targets if t not in ("_dynamic.*", "$management")]
        assert ("_dynamic.*" in targets) == bool(sends), group


def test_broker_queues_carry_ttl_delivery_limit_and_dead_letter(local: dict[str, str]) -> None:
    definitions = json.loads(local["brokers/broker-0.definitions.json"])
    queues = {q["name"]: q for q in definitions["queues"]}
    assert set(queues) == {
        "acme.orders", "iot.audit", "iot.commands", "iot.dlq", "iot.events", "iot.readings"
    }  # fmt: skip
    assert queues["iot.commands"]["arguments"]["x-message-ttl"] == 60_000
    assert queues["iot.events"]["arguments"]["x-delivery-limit"] == 5
    assert queues["iot.events"]["arguments"]["x-dead-letter-routing-key"] == "iot.dlq"
    assert all(q["durable"] and q["arguments"]["x-queue-type"] == "quorum" for q in queues.values())
    assert definitions["exchanges"][0]["name"] == "iot.alerts"
    assert definitions["bindings"] == [
        {
            "arguments": {},
            "destination": "iot.audit",
            "destination_type": "queue",
            "routing_key": "",
            "source": "iot.alerts",
            "vhost": "enmesh",
        }
    ]


def test_full_mesh_connects_each_pair_once(local: dict[str, str]) -> None:
    pairs = set()
    for i in range(3):
        conf = local[f"routers/local-router-{i}.conf"]
        for c in entities(conf, "connector"):
            if c["role"] == "inter-router":
                pairs.add(frozenset((f"local-router-{i}", c["name"])))
    assert len(pairs) == 3


def test_chain_topology_and_ports_across_hosts(multi: dict[str, str]) -> None:
    peers = {}
    for i in range(4):
        conf = multi[f"routers/multi-router-{i}.conf"]
        peers[i] = [c["name"] for c in entities(conf, "connector") if c["role"] == "inter-router"]
        listeners = {lst["name"]: lst for lst in entities(conf, "listener")}
        assert listeners["amqp"]["host"] == ("10.0.0.1" if i % 2 == 0 else "10.0.0.2")
        assert listeners["amqp"]["port"] == str(5672 + (i // 2) * 10)
    assert peers == {0: [], 1: ["multi-router-0"], 2: ["multi-router-1"], 3: ["multi-router-2"]}


def test_partitioned_queue_spans_two_brokers_and_dlq_follows(multi: dict[str, str]) -> None:
    conf = multi["routers/multi-router-0.conf"]
    holders = {a["connection"] for a in entities(conf, "autoLink") if a["address"] == "shop/orders"}
    assert len(holders) == 2
    for broker in holders:
        defs = json.loads(multi[f"brokers/{broker}.definitions.json"])
        assert {"shop.orders", "shop.orders-dlq"} <= {q["name"] for q in defs["queues"]}


def test_brokered_space_gets_its_own_vhost_limits_and_permissions(multi: dict[str, str]) -> None:
    holding = [
        json.loads(text)
        for path, text in multi.items()
        if path.endswith(".definitions.json")
        and "legacy" in {v["name"] for v in json.loads(text)["vhosts"]}
    ]
    assert len(holding) == 1  # brokered-small allows one broker
    defs = holding[0]
    assert {q["name"] for q in defs["queues"] if q["vhost"] == "legacy"} == {"jobs", "feed-archive"}
    limits = next(p for p in defs["parameters"] if p["vhost"] == "legacy")
    assert limits["value"] == {"max-connections": 100, "max-queues": 20}
    worker = next(p for p in defs["permissions"] if p["user"] == "worker@legacy")
    assert re.match(worker["read"], "jobs") and not re.match(worker["read"], "other")
    assert re.match(worker["write"], "feed") and not re.match(worker["write"], "jobs")
    for i in range(4):  # no router serves a brokered space
        assert "legacy/" not in multi[f"routers/multi-router-{i}.conf"]


def test_anonymous_space_offers_anonymous_only_there(multi: dict[str, str]) -> None:
    conf = multi["routers/multi-router-0.conf"]
    amqp = next(lst for lst in entities(conf, "listener") if lst["name"] == "amqp")
    assert "ANONYMOUS" in amqp["saslMechanisms"] and amqp["authenticatePeer"] == "false"
    assert json.loads(multi["auth/policies/public.json"])[0][1]["allowUnknownUser"] is True
    assert json.loads(multi["auth/policies/shop.json"])[0][1]["allowUnknownUser"] is False


def test_plain_only_over_tls(local: dict[str, str]) -> None:
    listeners = {
        lst["name"]: lst for lst in entities(local["routers/local-router-0.conf"], "listener")
    }
    assert "PLAIN" not in listeners["amqp"]["saslMechanisms"]
    assert "PLAIN" in listeners["amqps"]["saslMechanisms"]
    assert listeners["amqps"]["requireSsl"] == "true"


def test_no_secret_values_in_any_artefact(local: dict[str, str], multi: dict[str, str]) -> None:
    for files in (local, multi):
        for path, text in files.items():
            assert "saslPassword: file:" in text or "saslPassword" not in text, path
            assert "password_hash" not in text, path
    users = json.loads(local["auth/users.json"])
    assert {u["identity"] for u in users["messagingUsers"]} == {
        "app@acme",
        "backend@iot",
        "device@iot",
    }
    assert all(set(u["passwordSecret"]) == {"name", "key"} for u in users["messagingUsers"])


def test_compilation_is_deterministic() -> None:
    first = compile_stack_file(LOCAL)[1]
    second = compile_stack_file(LOCAL)[1]
    assert first.files == second.files and first.manifest() == second.manifest()


def test_adding_an_address_moves_no_other_address(tmp_path: Path) -> None:
    stack, models = load_stack(MULTI)
    before = compile_model(stack, load_model(models)).files
    extra = tmp_path / "extra.yml"
    extra.write_text(
        "apiVersion: enmesh.io/v1\nkind: Address\nmetadata: {name: shop.returns}\n"
        "spec: {addressSpace: shop, address: returns, type: queue, plan: queue}\n"
    )
    after = compile_model(stack, load_model([*models, extra])).files

    def holders(files: dict[str, str]) -> set[tuple[str, str]]:
        conf = files["routers/multi-router-0.conf"]
        return {(a["address"], a["connection"]) for a in entities(conf, "autoLink")}

    assert holders(before) < holders(after)
    assert {h for h in holders(after) if h[0] != "shop/returns"} == holders(before)


def test_rank_is_stable_and_minimal_disruption() -> None:
    three = rank(["b0", "b1", "b2"], "key", 3)
    assert three == rank(["b2", "b0", "b1"], "key", 3)  # input order does not matter
    four = rank(["b0", "b1", "b2", "b3"], "key", 4)
    assert [b for b in four if b != "b3"] == three  # a new broker only inserts itself


def test_partitions_beyond_stack_brokers_is_a_compile_error(tmp_path: Path) -> None:
    stack, models = load_stack(MULTI)
    small = stack.model_copy(
        update={"spec": stack.spec.model_copy(update={"brokers": stack.spec.brokers[:1]})}
    )
    with pytest.raises(CompileError, match=r"'orders' in space 'shop' needs 2 brokers"):
        compile_model(small, load_model(models))


def test_content_hash_changes_with_the_model(tmp_path: Path) -> None:
    stack, models = load_stack(LOCAL)
    base = compile_model(stack, load_model(models))
    extra = tmp_path / "extra.yml"
    extra.write_text(
        "apiVersion: enmesh.io/v1\nkind: Address\nmetadata: {name: iot.status}\n"
        "spec: {addressSpace: iot, address: status, type: anycast, plan: standard-anycast}\n"
    )
    changed = compile_model(stack, load_model([*models, extra]))
    assert base.content_hash("routers/") != changed.content_hash("routers/")
    assert base.content_hash("brokers/") == changed.content_hash("brokers/")


def test_content_hash_covers_every_prefix_given() -> None:
    base = Artefacts({"routers/r.conf": "r", "auth/users.json": "1", "brokers/b.json": "b"})
    users_changed = Artefacts({**base.files, "auth/users.json": "2"})
    assert base.content_hash("routers/") == users_changed.content_hash("routers/")
    assert base.content_hash("routers/", "auth/") != users_changed.content_hash("routers/", "auth/")
    assert base.content_hash() != users_changed.content_hash()
    assert len(base.content_hash("routers/", "auth/")) == 10


def test_broker_config_is_tls_only_with_the_routers_vhost(local: dict[str, str]) -> None:
    conf = dict(
        line.split(" = ", 1)
        for line in local["brokers/broker-0.rabbitmq.conf"].splitlines()
        if not line.startswith("#")
    )
    assert conf["listeners.tcp"] == "none"
    assert conf["listeners.ssl.default"] == "127.0.0.1:25671"
    assert conf["ssl_options.certfile"] == "/var/lib/enmesh/tls/broker-0.crt"
    assert conf["amqp1_0.default_vhost"] == "enmesh"
    assert conf["amqp1_0.default_user"] == "none"
    assert conf["load_definitions"] == "/etc/enmesh/brokers/broker-0.definitions.json"


def test_topic_subscriber_queues_expire(local: dict[str, str]) -> None:
    definitions = json.loads(local["brokers/broker-0.definitions.json"])
    policy = next(p for p in definitions["policies"] if p["name"] == "enmesh-temporary-queues")
    assert re.match(policy["pattern"], "amq.gen-Xyz") and not re.match(policy["pattern"], "iot.x")
    assert policy["definition"] == {"expires": 60_000}
    assert definitions["exchanges"][0]["type"] == "fanout"
