"""`enmesh apply` from the command line: what it says when it cannot apply (no processes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from enmesh.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _stack(tmp_path: Path, model: str) -> Path:
    (tmp_path / "m.model.yml").write_text(model)
    stack = (ROOT / "stacks" / "local.stack.yml").read_text()
    stack = stack.replace("models: [iot.model.yml]", "models: [m.model.yml]")
    stack = stack.replace("config: /etc/enmesh", f"config: {tmp_path / 'etc'}")
    path = tmp_path / "local.stack.yml"
    path.write_text(stack)
    return path


def test_a_stack_never_deployed_here_is_named_with_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stack = _stack(tmp_path, (ROOT / "stacks" / "iot.model.yml").read_text())
    assert main(["apply", "--stack", str(stack), "--dry-run"]) == 1
    err = capsys.readouterr().err
    assert "is not deployed on this host" in err and "enmesh up --stack" in err


def test_an_invalid_model_is_refused_with_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = (
        (ROOT / "stacks" / "iot.model.yml").read_text().replace("type: anycast", "type: anycats", 1)
    )
    line = next(i for i, text in enumerate(model.splitlines(), 1) if "anycats" in text)
    stack = _stack(tmp_path, model)
    (tmp_path / "etc").mkdir()
    deployment = {
        "stack": "local",
        "routers": [],
        "brokers": [],
        "sasldb": str(tmp_path / "db"),
        "paths": {
            "config": str(tmp_path / "etc"),
            "state": str(tmp_path),
            "secrets": str(tmp_path),
        },
    }
    (tmp_path / "etc" / "deploy.json").write_text(json.dumps(deployment))
    assert main(["apply", "--stack", str(stack)]) == 1
    err = capsys.readouterr().err
    assert f"m.model.yml:{line}:" in err
    assert sorted(p.name for p in (tmp_path / "etc").iterdir()) == [
        "deploy.json"
    ]  # nothing installed
