"""A byte-for-byte reproducible source archive of enmesh, to install on deployed hosts.

The archive changes only when a packaged file changes (sorted entries, zero
timestamps and owners, no `__pycache__`), so the playbook's copy of it reports a change
exactly when hosts need a new install. `pip install ARCHIVE` builds it like an sdist.
"""

from __future__ import annotations

import gzip
import io
import tarfile
import tomllib
from pathlib import Path

ROOT = "enmesh-src"
TOP_LEVEL_FILES = ("pyproject.toml", "README.md")
PACKAGE_SUFFIXES = {".py", ".typed"}
PACKAGES = ("enmesh", "spark/enmesh_spark")  # as pyproject.toml finds them


def _members(project: Path) -> list[Path]:
    files = [project / name for name in TOP_LEVEL_FILES]
    files += [
        path
        for package in PACKAGES
        for path in (project / package).rglob("*")
        if path.is_file() and path.suffix in PACKAGE_SUFFIXES and "__pycache__" not in path.parts
    ]
    files += [path for pattern in package_data(project) for path in project.glob(pattern)]
    return sorted({path for path in files if path.is_file()})


def package_data(project: Path) -> list[str]:
    """pyproject's tool.setuptools.package-data, as globs from the project's root: the
    engines' schemas, the console's templates and static files (Chart.js among them, which
    `make setup` fetches), the Keycloak provider's sources. One list, so the archive and
    pip's build agree."""
    pyproject = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))
    data: dict[str, list[str]] = pyproject["tool"]["setuptools"]["package-data"]
    return [f"{package}/{pattern}" for package, patterns in data.items() for pattern in patterns]


def reproducible_member(name: str, size: int) -> tarfile.TarInfo:
    """A tar entry that depends on name and size only (no timestamp, owner or mode of
    the file it came from), so equal content packs to equal bytes."""
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = size, 0o644, 0
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def add_file(archive: tarfile.TarFile, path: Path, name: str) -> None:
    """Add the file at `path` as `name` (a reproducible_member), streamed from disk."""
    with path.open("rb") as data:
        archive.addfile(reproducible_member(name, path.stat().st_size), data)


def build_bundle(project: Path) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for path in _members(project):
            data = path.read_bytes()
            name = f"{ROOT}/{path.relative_to(project).as_posix()}"
            archive.addfile(reproducible_member(name, len(data)), io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)


def write_bundle(project: Path, out: Path) -> bool:
    """Write the archive to `out` if its content changed; returns whether it did."""
    data = build_bundle(project)
    if out.is_file() and out.read_bytes() == data:
        return False
    out.parent.mkdir(parents=True, exist_ok=True)
    temporary = out.with_name(f".{out.name}.tmp")
    temporary.write_bytes(data)
    temporary.replace(out)
    return True
