"""The source archive hosts install enmesh from (enmesh deploy bundle)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from enmesh.cli import main
from enmesh.deploy.bundle import build_bundle
from tests.support.builds import CHANGED_FILE, new_build

ROOT = Path(__file__).resolve().parents[2]


def test_the_archive_holds_the_package_data_pip_is_told_of() -> None:
    """pyproject's package-data is the one list: the Keycloak provider's sources, which
    hosts compile into Keycloak, travel with the code (they once did not)."""
    with tarfile.open(fileobj=io.BytesIO(build_bundle(ROOT))) as archive:
        names = set(archive.getnames())
    provider = ROOT / "enmesh" / "deploy" / "keycloak_scram"
    sources = [p for p in provider.rglob("*") if p.is_file()]
    assert len(sources) >= 3  # two classes and the service registration
    for path in sources:
        assert f"enmesh-src/{path.relative_to(ROOT)}" in names, path
    assert "enmesh-src/enmesh/compile/engines/qdrouterd-1.19-config-names.json" in names
    assert "enmesh-src/pyproject.toml" in names


def test_bundle_packs_the_source_tree_it_is_given(tmp_path: Path) -> None:
    """`enmesh deploy bundle --source DIR` packs another build (an upgrade's), and the
    same tree packs byte for byte as the checkout does."""
    out = tmp_path / "enmesh-src.tar.gz"
    tree = new_build(tmp_path / "new", "build 2")
    assert main(["deploy", "bundle", "--out", str(out), "--source", str(tree)]) == 0
    with tarfile.open(out) as archive:
        member = archive.extractfile(f"enmesh-src/{CHANGED_FILE}")
        assert member is not None and member.read().decode().endswith("# build 2\n")
    assert out.read_bytes() != build_bundle(ROOT)
    (tree / CHANGED_FILE).write_text((ROOT / CHANGED_FILE).read_text())
    assert main(["deploy", "bundle", "--out", str(out), "--source", str(tree)]) == 0
    assert out.read_bytes() == build_bundle(ROOT)
