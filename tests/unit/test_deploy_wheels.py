"""`enmesh deploy wheels`: a wheelhouse packed for air-gapped hosts in one reproducible
archive, rewritten only when a wheel changes, refused with the reason when it holds none."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import pytest

from enmesh.cli import main
from enmesh.deploy.wheels import WheelhouseError, write_wheels_archive


def _wheelhouse(directory: Path, wheels: dict[str, bytes]) -> Path:
    directory.mkdir(exist_ok=True)
    for name, data in wheels.items():
        (directory / name).write_bytes(data)
    return directory


def test_the_archive_holds_the_wheels_sorted_and_is_written_only_on_change(
    tmp_path: Path,
) -> None:
    wheelhouse = _wheelhouse(
        tmp_path / "wheels",
        {"pyyaml-6.0-cp311.whl": b"y" * 30, "jinja2-3.1-py3.whl": b"j" * 10, "complete": b"ok"},
    )
    out = tmp_path / "build" / "wheels.tar"
    assert write_wheels_archive(wheelhouse, out) is True
    with tarfile.open(out) as archive:
        members = archive.getmembers()
        assert archive.extractfile("wheels/pyyaml-6.0-cp311.whl").read() == b"y" * 30  # type: ignore[union-attr]
    assert [m.name for m in members] == ["wheels/jinja2-3.1-py3.whl", "wheels/pyyaml-6.0-cp311.whl"]
    assert {m.mtime for m in members} == {0}
    first = out.read_bytes()

    os.utime(wheelhouse / "jinja2-3.1-py3.whl", (1, 1))  # a new timestamp is no change
    assert write_wheels_archive(wheelhouse, out) is False
    assert not list(out.parent.glob(".*.tmp"))

    (wheelhouse / "jinja2-3.1-py3.whl").unlink()
    _wheelhouse(wheelhouse, {"jinja2-3.2-py3.whl": b"k" * 10})
    assert write_wheels_archive(wheelhouse, out) is True
    assert out.read_bytes() != first


def test_a_wheelhouse_without_wheels_is_refused_naming_how_to_build_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "complete").write_text("ok")
    out = tmp_path / "wheels.tar"
    code = main(["deploy", "wheels", "--wheelhouse", str(tmp_path), "--out", str(out)])
    assert code != 0
    error = capsys.readouterr().err
    assert f"{tmp_path}: no .whl file" in error and "pip wheel --wheel-dir" in error, error
    assert not list(tmp_path.glob("*.tar")) and not list(tmp_path.glob(".*.tmp"))


def test_a_missing_wheelhouse_is_refused(tmp_path: Path) -> None:
    with pytest.raises(WheelhouseError, match="no such directory"):
        write_wheels_archive(tmp_path / "absent", tmp_path / "wheels.tar")
