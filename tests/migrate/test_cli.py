"""`enmesh migrate` on the command line: its options, and a stack that is not deployed."""

from __future__ import annotations

from pathlib import Path

import pytest

from enmesh.cli import main
from tests.support.mesh import build_mesh


def test_migrate_needs_both_stacks(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["migrate", "plan", "--from", "local"])
    assert exit_.value.code == 2
    assert "--to" in capsys.readouterr().err


def test_undeployed_stack_is_refused_clearly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mesh = build_mesh(tmp_path / "a", routers=1)
    (mesh.directory / "config" / "deploy.json").unlink()
    stack = str(mesh.directory / "test.stack.yml")
    code = main(["migrate", "move-stored", "--from", stack, "--to", stack])
    err = capsys.readouterr().err
    assert code == 1
    assert "stack 'test' is not deployed on this host" in err
    assert "deploy.json is missing" in err
