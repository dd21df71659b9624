"""Python wheels for air-gapped hosts: the deployer's wheelhouse packed into one archive
the roles copy to each host (one checked transfer instead of a few checked transfers per
wheel: Ansible's copy of a 32-wheel directory took 461 s over five hosts one at a time on
a loaded machine, most of it round trips for files that had not changed).

The archive is reproducible (sorted entries, no timestamps or owners), so equal wheels
pack to equal bytes and the hosts' copy changes exactly when a wheel does.
"""

from __future__ import annotations

import filecmp
import tarfile
from pathlib import Path

from enmesh.deploy.bundle import add_file

ROOT = "wheels"  # the directory the archive unpacks to
SUFFIX = ".whl"


class WheelhouseError(ValueError):
    """The directory holds no wheel to install; the message says how to build one."""


def wheel_files(wheelhouse: Path) -> list[Path]:
    """The wheels of `wheelhouse`, sorted by name (other files, such as a cache's marker,
    are left out: pip reads only the wheels)."""
    if not wheelhouse.is_dir():
        raise WheelhouseError(f"{wheelhouse}: no such directory")
    wheels = sorted(p for p in wheelhouse.iterdir() if p.is_file() and p.suffix == SUFFIX)
    if not wheels:
        raise WheelhouseError(
            f"{wheelhouse}: no {SUFFIX} file; build the wheelhouse with "
            f"`pip wheel --wheel-dir {wheelhouse} <enmesh's source>` (docs/sites.md)"
        )
    return wheels


def write_wheels_archive(wheelhouse: Path, out: Path) -> bool:
    """Pack the wheels into `out` (an uncompressed tar: wheels are zip files already)
    unless `out` already holds these bytes; returns whether it wrote."""
    wheels = wheel_files(wheelhouse)
    out.parent.mkdir(parents=True, exist_ok=True)
    temporary = out.with_name(f".{out.name}.tmp")
    with tarfile.open(temporary, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for wheel in wheels:
            add_file(archive, wheel, f"{ROOT}/{wheel.name}")
    if out.is_file() and filecmp.cmp(out, temporary, shallow=False):
        temporary.unlink()
        return False
    temporary.replace(out)
    return True
