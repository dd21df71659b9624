"""`enmesh export`: the console's changes (the runtime part of the model) printed as model
YAML, and moved into a model file of the stack without changing the model."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from enmesh.cli import main
from enmesh.compile import load_stack
from enmesh.console.runtime import RUNTIME_FILE, address_document
from enmesh.model import load_model

ROOT = Path(__file__).resolve().parents[2]


def _stack(tmp_path: Path) -> Path:
    """The local stack over a copy of its model, its state under tmp_path, and one address
    the console added (written with the console's own document builder)."""
    (tmp_path / "iot.model.yml").write_text((ROOT / "stacks" / "iot.model.yml").read_text())
    stack = (ROOT / "stacks" / "local.stack.yml").read_text()
    stack = stack.replace("state: /var/lib/enmesh", f"state: {tmp_path / 'state'}")
    path = tmp_path / "local.stack.yml"
    path.write_text(stack)
    runtime = tmp_path / "state" / "runtime"
    runtime.mkdir(parents=True)
    added = address_document(
        "iot", {"address": "firmware", "type": "queue", "plan": "standard-queue"}
    )
    (runtime / RUNTIME_FILE).write_text(yaml.safe_dump_all([added], explicit_start=True))
    return path


def _model(stack_file: Path) -> object:
    _, models = load_stack(stack_file)
    return load_model(models).tenants


def test_export_prints_the_runtime_documents(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stack = _stack(tmp_path)
    assert main(["export", "--stack", str(stack)]) == 0
    (document,) = list(yaml.safe_load_all(capsys.readouterr().out))
    assert document["kind"] == "Address"
    assert document["spec"]["address"] == "firmware"


def test_export_into_a_model_file_moves_them_and_keeps_the_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stack = _stack(tmp_path)
    before = _model(stack)
    assert main(["export", "--stack", str(stack), "--into", str(tmp_path / "iot.model.yml")]) == 0
    assert "moved 1 documents" in capsys.readouterr().out
    assert "address: firmware" in (tmp_path / "iot.model.yml").read_text()
    assert list((tmp_path / "state" / "runtime").iterdir()) == []
    assert _model(stack) == before
    assert main(["export", "--stack", str(stack)]) == 0  # nothing left to export
    captured = capsys.readouterr()
    assert captured.out == "" and "no runtime changes" in captured.err


def test_export_into_a_file_outside_the_stack_moves_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stack = _stack(tmp_path)
    elsewhere = tmp_path / "other.model.yml"
    elsewhere.write_text("")
    assert main(["export", "--stack", str(stack), "--into", str(elsewhere)]) == 1
    assert "is not one of stack 'local'" in capsys.readouterr().err
    assert elsewhere.read_text() == ""
    assert (tmp_path / "state" / "runtime" / RUNTIME_FILE).exists()
