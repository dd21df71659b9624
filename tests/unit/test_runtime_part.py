"""The runtime part of the model (what the console adds): `load_stack` adds its files to the
stack's, the console's form becomes a model document whose problems go back to its fields,
and the part only adds (a name git defines is a duplicate)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from enmesh.compile import load_stack
from enmesh.console.runtime import GENERAL, address_document, field_errors
from enmesh.model import ModelInvalidError, load_model, validate_files
from tests.support.mesh import SAMPLE_MODEL

ADDRESS = {"address": "jobs", "type": "queue", "plan": "standard-queue", "maxDeliveries": "3"}


def _stack(tmp_path: Path) -> Path:
    (tmp_path / "iot.model.yml").write_text(SAMPLE_MODEL.read_text())
    stack = {
        "apiVersion": "enmesh.io/v1",
        "kind": "Stack",
        "metadata": {"name": "t"},
        "spec": {
            "models": ["iot.model.yml"],
            "brokers": [{"name": "broker-0", "host": "127.0.0.1"}],
            "paths": {
                "config": str(tmp_path / "c"),
                "state": str(tmp_path / "s"),
                "secrets": str(tmp_path / "x"),
            },
        },
    }
    path = tmp_path / "t.stack.yml"
    path.write_text(json.dumps(stack))
    return path


def _runtime(tmp_path: Path, *documents: dict[str, object]) -> Path:
    folder = tmp_path / "s" / "runtime"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "console.model.yml"
    path.write_text("".join("---\n" + json.dumps(d) + "\n" for d in documents))
    return path


def test_load_stack_adds_the_runtime_part(tmp_path: Path) -> None:
    stack_file = _stack(tmp_path)
    assert load_stack(stack_file)[1] == [tmp_path / "iot.model.yml"]
    runtime = _runtime(tmp_path, address_document("iot", ADDRESS))
    _, files = load_stack(stack_file)
    assert files == [tmp_path / "iot.model.yml", runtime]
    jobs = [a for a in load_model(files).tenant("iot").addresses if a.spec.address == "jobs"]
    assert jobs and jobs[0].spec.maxDeliveries == 3


def test_a_name_git_defines_is_a_duplicate_at_the_address_field(tmp_path: Path) -> None:
    stack_file = _stack(tmp_path)
    _runtime(tmp_path, address_document("iot", {**ADDRESS, "address": "events"}))
    with pytest.raises(ModelInvalidError):
        load_model(load_stack(stack_file)[1])
    errors = field_errors(validate_files(load_stack(stack_file)[1]))
    assert set(errors) == {"address"}
    assert any("duplicate address 'events'" in message for message in errors["address"])


def test_each_problem_goes_to_its_field(tmp_path: Path) -> None:
    stack_file = _stack(tmp_path)
    form = {"address": "x y", "type": "queue", "plan": "standard-queue", "ttlSeconds": "soon"}
    _runtime(tmp_path, address_document("iot", form))
    errors = field_errors(validate_files(load_stack(stack_file)[1]))
    assert set(errors) - {GENERAL} == {"address", "ttlSeconds"}
    assert len(errors["address"]) == 1  # not again for the name made of it
