"""The sample model and the fixtures compiled for each router engine: every entity and
attribute written is one the engine accepts (read back from the rendered files), or render
refuses and names the features, who needs them and which engines have them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from enmesh.compile import CompileError, Stack, compile_model, load_stack
from enmesh.compile.engines import Engine, Feature, profile_of
from enmesh.compile.engines.check import config_problems
from enmesh.compile.qdrouterd import Entity
from enmesh.model import load_model
from tests.support.engine_names import names_problems

ROOT = Path(__file__).resolve().parents[2]
STACK_FILES = {
    "local": ROOT / "stacks" / "local.stack.yml",
    "multi": ROOT / "tests" / "fixtures" / "multi.stack.yml",
}
ENGINES = Path(__file__).resolve().parents[2] / "enmesh" / "compile" / "engines"
SERVING = (Engine.ENMESH_ROUTER, Engine.QDROUTERD)
# What skupper-router 3.x lacks, per stack (the multi fixture's topic is in a brokered space).
SKUPPER_MISSING = {
    "local": {Feature.MULTI_TENANT, Feature.WAYPOINTS, Feature.LINK_ROUTES},
    "multi": {Feature.MULTI_TENANT, Feature.WAYPOINTS},
}


def _with_engine(stack: Stack, engine: Engine) -> Stack:
    routers = stack.spec.routers.model_copy(update={"engine": engine})
    return stack.model_copy(update={"spec": stack.spec.model_copy(update={"routers": routers})})


def _compile(name: str, engine: Engine, model_files: list[Path] | None = None) -> dict[str, str]:
    stack, models = load_stack(STACK_FILES[name])
    return compile_model(_with_engine(stack, engine), load_model(model_files or models)).files


@pytest.mark.parametrize("engine", SERVING)
@pytest.mark.parametrize("name", sorted(STACK_FILES))
def test_every_name_written_is_one_the_engine_accepts(name: str, engine: Engine) -> None:
    files = _compile(name, engine)
    assert names_problems(engine, files) == []
    conf = files[f"routers/{name}-router-0.conf"]
    assert "saslConfigDir: " in conf and "saslConfigPath" not in conf
    assert "multiTenant: true" in conf and "waypoint: true" in conf
    assert ("linkRoute {" in conf) is (name == "local")  # multi's topic is in a brokered space


@pytest.mark.parametrize("name", sorted(STACK_FILES))
def test_skupper_router_refuses_naming_features_users_and_engines(name: str) -> None:
    with pytest.raises(CompileError) as refused:
        _compile(name, Engine.SKUPPER_ROUTER)
    message = str(refused.value)
    assert "engine skupper-router 3.4.1 cannot serve this model" in message
    named = {f for f in Feature if f"  - {f.label}: needed by " in message}
    assert named == SKUPPER_MISSING[name]
    assert "enmesh-router and qdrouterd 1.19 have it" in message
    if name == "local":
        assert "address space 'iot'" in message and "address space 'acme'" in message
        assert "queue iot/events" in message and "topic iot/alerts" in message
        assert "subscription iot/audit" in message
    else:
        assert "deadletter shop/orders-dlq" in message and "legacy" not in message


def _brokered_only(tmp_path: Path) -> list[Path]:
    """The multi fixture without its standard spaces: routers carry no address."""
    documents = list(
        yaml.safe_load_all((STACK_FILES["multi"].parent / "multi.model.yml").read_text())
    )

    def standard(doc: dict[str, Any]) -> bool:
        space = doc["spec"].get("addressSpace", doc["metadata"]["name"])
        return doc["kind"] in {"AddressSpace", "Address", "MessagingUser"} and space in {
            "shop",
            "public",
        }

    path = tmp_path / "brokered.model.yml"
    path.write_text(yaml.safe_dump_all([d for d in documents if not standard(d)]))
    return [path]


def test_a_model_skupper_router_can_serve_compiles_to_names_it_accepts(tmp_path: Path) -> None:
    files = _compile("multi", Engine.SKUPPER_ROUTER, _brokered_only(tmp_path))
    assert names_problems(Engine.SKUPPER_ROUTER, files) == []
    conf = files["routers/multi-router-0.conf"]
    assert "multiTenant" not in conf and "saslConfigDir: /opt/enmesh/etc/auth/sasl2" in conf


def test_the_profiles_record_what_each_engine_has_and_where_it_came_from() -> None:
    features = {e: profile_of(e).features for e in Engine}
    assert features[Engine.SKUPPER_ROUTER] == {Feature.VHOST_POLICY, Feature.SASL_CONFIG_DIR}
    assert features[Engine.QDROUTERD] == set(Feature)
    assert features[Engine.ENMESH_ROUTER] == set(Feature)  # authServicePlugin too (saslrelay)
    sources = {e: profile_of(e).source for e in Engine}
    assert "skupper-router 3.4.1" in sources[Engine.SKUPPER_ROUTER]
    assert "7b985e930590e328dfdbe561024b329452bb7279" in sources[Engine.SKUPPER_ROUTER]
    assert "skrouter.json" in sources[Engine.SKUPPER_ROUTER]
    assert (
        "qdrouterd 1.19.0" in sources[Engine.QDROUTERD]
        and "qdrouter.json" in sources[Engine.QDROUTERD]
    )
    assert "config_schema.py" in sources[Engine.ENMESH_ROUTER]
    for file in ENGINES.glob("*-config-names.json"):
        assert set(json.loads(file.read_text())) == {"source", "entities"}


@pytest.mark.parametrize(
    ("engine", "entity", "problem"),
    [
        (Engine.SKUPPER_ROUTER, Entity("linkRoute", {"prefix": "a"}), "entity 'linkRoute'"),
        (Engine.SKUPPER_ROUTER, Entity("router", {"saslConfigPath": "/x"}), "'saslConfigPath'"),
        (Engine.SKUPPER_ROUTER, Entity("listener", {"multiTenant": True}), "'multiTenant'"),
        (Engine.SKUPPER_ROUTER, Entity("autoLink", {"phase": 1}), "'phase'"),
        (Engine.ENMESH_ROUTER, Entity("listener", {"cost": 2}), "accepts only '1'"),
        (Engine.SKUPPER_ROUTER, Entity("authServicePlugin", {"name": "a"}), "'authServicePlugin'"),
    ],
)
def test_the_check_rejects_what_an_engine_would_refuse(
    engine: Engine, entity: Entity, problem: str
) -> None:
    problems = config_problems(profile_of(engine), [entity], "r0")
    assert len(problems) == 1 and problem in problems[0]
