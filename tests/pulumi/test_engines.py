"""Each Kubernetes stack runs an engine that can start its configs: the router configs the
StatefulSet mounts are checked name by name against the profile of the engine it runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml

from enmesh.compile.engines import Engine
from enmesh.k8s.capture import Capture
from enmesh.k8s.schema import pod_spec
from tests.pulumi.conftest import ROOT, capture_of, run_with
from tests.support.engine_names import names_problems

ENGINE_OF_COMMAND = {
    "enmesh-router": Engine.ENMESH_ROUTER,
    "skrouterd": Engine.SKUPPER_ROUTER,
    "qdrouterd": Engine.QDROUTERD,
}


def _deployed(capture: Capture, stack: str) -> tuple[Engine, dict[str, str]]:
    """The engine the router pods run and the files of the config Secret they mount."""
    (router,) = [
        o for o in capture.kind("StatefulSet") if o["metadata"]["name"] == f"{stack}-router"
    ]
    command = pod_spec(router)["containers"][0]["command"]  # type: ignore[index]
    (secret,) = [
        o
        for o in capture.kind("Secret")
        if o["metadata"]["name"] == capture.outputs["routerConfigSecret"]
    ]
    files = {key.replace("_", "/", 1): text for key, text in secret["stringData"].items()}
    return ENGINE_OF_COMMAND[command[0]], files


def test_every_stack_runs_an_engine_that_accepts_its_configs(stack: str) -> None:
    engine, files = _deployed(capture_of(stack), stack)
    assert engine is Engine.ENMESH_ROUTER  # the default: the sample model needs it
    assert names_problems(engine, files) == []


def test_the_check_would_fail_if_the_configs_did_not_fit_the_engine() -> None:
    _, files = _deployed(capture_of("local"), "local")
    problems = names_problems(Engine.SKUPPER_ROUTER, files)
    assert any(p.endswith("listener.multiTenant") for p in problems)
    assert any(p.endswith("entity linkRoute") for p in problems)


def test_skupper_router_is_refused_for_the_sample_model_naming_what_it_lacks() -> None:
    with pytest.raises(pulumi.RunError) as refused:
        run_with("local", routerEngine="skupper-router")
    message = str(refused.value)
    assert "engine skupper-router 3.4.1 cannot serve this model" in message
    for feature in ("listener multiTenant", "linkRoute", "address waypoint"):
        assert feature in message


def _brokered_model(tmp_path: Path) -> str:
    """The sample's plans and a brokered space with a queue: nothing for routers to route."""
    documents: list[dict[str, Any]] = [
        d
        for d in yaml.safe_load_all((ROOT / "stacks" / "iot.model.yml").read_text())
        if d["kind"] in {"AddressPlan", "AddressSpacePlan"}
    ]
    documents += [
        {
            "apiVersion": "enmesh.io/v1",
            "kind": "AddressSpacePlan",
            "metadata": {"name": "brokered"},
            "spec": {
                "addressSpaceType": "brokered",
                "resourceLimits": {"connections": 10, "addresses": 5},
                "addressPlans": ["standard-queue"],
            },
        },
        {
            "apiVersion": "enmesh.io/v1",
            "kind": "AddressSpace",
            "metadata": {"name": "jobs"},
            "spec": {"type": "brokered", "plan": "brokered"},
        },
        {
            "apiVersion": "enmesh.io/v1",
            "kind": "Address",
            "metadata": {"name": "jobs.work"},
            "spec": {
                "addressSpace": "jobs",
                "address": "work",
                "type": "queue",
                "plan": "standard-queue",
            },
        },
    ]
    path = tmp_path / "brokered.model.yml"
    path.write_text(yaml.safe_dump_all(documents), encoding="utf-8")
    return str(path)


def test_skupper_router_runs_a_model_it_can_serve(tmp_path: Path) -> None:
    # skupper-router has no authServicePlugin: its stacks keep the routers' own database.
    capture = run_with(
        "local",
        routerEngine="skupper-router",
        identity="sasldb",
        models=[_brokered_model(tmp_path)],
    )
    engine, files = _deployed(capture, "local")
    assert engine is Engine.SKUPPER_ROUTER
    assert names_problems(engine, files) == []
