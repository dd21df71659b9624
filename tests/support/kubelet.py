"""A directory laid out and updated the way kubelet projects a Secret or ConfigMap volume
(`AtomicWriter`, pkg/volume/util/atomic_writer.go in Kubernetes): the files live in a
hidden timestamped directory, `..data` is a symlink to it, and each top-level name is a
symlink through `..data`. An update writes a new timestamped directory, points
`..data_tmp` at it, renames that over `..data` (one atomic rename: a reader sees all old
or all new files) and then removes the old directory."""

from __future__ import annotations

import shutil
import time
from collections.abc import Mapping
from pathlib import Path

DATA = "..data"


def _payload(directory: Path, files: Mapping[str, str]) -> Path:
    now = time.time_ns()
    stamp = directory / f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{now % 10**9:09d}"
    for relative, text in files.items():
        path = stamp / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return stamp


def _link_top_level(directory: Path, files: Mapping[str, str]) -> None:
    wanted = {relative.split("/", 1)[0] for relative in files}
    for entry in directory.iterdir():
        if not entry.name.startswith("..") and entry.is_symlink() and entry.name not in wanted:
            entry.unlink()
    for name in sorted(wanted):
        if not (directory / name).is_symlink():
            (directory / name).symlink_to(f"{DATA}/{name}")


def project(directory: Path, files: Mapping[str, str]) -> None:
    """The volume as kubelet first mounts it."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / DATA).symlink_to(_payload(directory, files).name)
    _link_top_level(directory, files)


def update(directory: Path, files: Mapping[str, str]) -> None:
    """The volume after the Secret or ConfigMap changed in place."""
    old = (directory / DATA).readlink()
    fresh = _payload(directory, files)
    temporary = directory / "..data_tmp"
    temporary.symlink_to(fresh.name)
    temporary.rename(directory / DATA)
    _link_top_level(directory, files)
    shutil.rmtree(directory / old)


def replace_with_projection(directory: Path) -> dict[str, str]:
    """Turn a plain directory of files into kubelet's layout; returns the files."""
    files = {
        path.relative_to(directory).as_posix(): path.read_text(encoding="utf-8")
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }
    shutil.rmtree(directory)
    project(directory, files)
    return files
