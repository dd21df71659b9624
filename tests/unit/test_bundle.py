"""The source archive hosts install enmesh from (enmesh deploy bundle)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from enmesh.deploy.bundle import build_bundle

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
