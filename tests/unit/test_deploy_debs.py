"""`enmesh deploy debs`: a flat apt repository packed for air-gapped hosts, rewritten only
when its index changes, refused with the reason when it is not a complete repository."""

from __future__ import annotations

import hashlib
import tarfile
from pathlib import Path

import pytest

from enmesh.cli import main
from enmesh.deploy.debs import RepositoryError, write_archive


def _repository(directory: Path, packages: dict[str, bytes]) -> Path:
    """.deb stand-ins and the index dpkg-scanpackages would write for them (the archive
    reads only the index's Package, Filename and Size)."""
    directory.mkdir(exist_ok=True)
    stanzas = []
    for name, data in sorted(packages.items()):
        filename = f"{name}_1.0_amd64.deb"
        (directory / filename).write_bytes(data)
        sha = hashlib.sha256(data).hexdigest()
        stanzas.append(
            f"Package: {name}\nVersion: 1.0\nArchitecture: amd64\n"
            f"Filename: ./{filename}\nSize: {len(data)}\nSHA256: {sha}\n"
        )
    (directory / "Packages").write_text("\n".join(stanzas))
    return directory


def test_the_archive_holds_the_index_and_its_files_and_is_written_only_on_change(
    tmp_path: Path,
) -> None:
    repository = _repository(tmp_path / "repo", {"sasl2-bin": b"a" * 10, "openssl": b"b" * 20})
    (repository / "stray.txt").write_text("not in the index")
    out = tmp_path / "build" / "debs.tar"
    assert write_archive(repository, out) is True
    with tarfile.open(out) as archive:
        members = archive.getmembers()
    assert [m.name for m in members] == [
        "debs/Packages",
        "debs/openssl_1.0_amd64.deb",
        "debs/sasl2-bin_1.0_amd64.deb",
    ]
    assert {m.mtime for m in members} == {0}
    first = out.read_bytes()
    assert write_archive(repository, out) is False
    _repository(repository, {"sasl2-bin": b"a" * 10, "openssl": b"c" * 21})
    assert write_archive(repository, out) is True
    assert out.read_bytes() != first


def test_a_directory_without_an_index_is_refused_naming_the_command(tmp_path: Path) -> None:
    (tmp_path / "openssl_1.0_amd64.deb").write_bytes(b"x")
    with pytest.raises(RepositoryError, match="dpkg-scanpackages --multiversion"):
        write_archive(tmp_path, tmp_path / "debs.tar")


def test_an_index_naming_a_missing_or_changed_file_is_refused_naming_the_package(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repository = _repository(tmp_path / "repo", {"openssl": b"b" * 20})
    (repository / "openssl_1.0_amd64.deb").write_bytes(b"b" * 19)
    out = tmp_path / "debs.tar"
    code = main(["deploy", "debs", "--repository", str(repository), "--out", str(out)])
    assert code != 0
    error = capsys.readouterr().err
    assert "openssl's ./openssl_1.0_amd64.deb is missing or not 20 bytes" in error, error
    assert not out.exists()


def test_an_index_naming_a_file_outside_the_repository_is_refused(tmp_path: Path) -> None:
    repository = _repository(tmp_path / "repo", {"openssl": b"b" * 20})
    (tmp_path / "secret").write_bytes(b"s" * 20)
    index = repository / "Packages"
    index.write_text(index.read_text().replace("./openssl_1.0_amd64.deb", "../secret"))
    with pytest.raises(RepositoryError, match="outside it"):
        write_archive(repository, tmp_path / "debs.tar")
