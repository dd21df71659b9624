"""Debian packages for air-gapped hosts: the deployer's flat apt repository, packed once
into one archive the roles copy to each host that misses a package (one transfer instead
of a few hundred; no apt mirror, no server on the deployer).

A flat repository is a directory of .deb files and its `Packages` index
(`dpkg-scanpackages . > Packages`), which names each file with its size and SHA-256: the
index is the repository's identity, so the archive is rewritten only when it changes.
"""

from __future__ import annotations

import hashlib
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path

from enmesh.deploy.bundle import add_file

INDEX = "Packages"
ROOT = "debs"  # the directory the archive unpacks to


class RepositoryError(ValueError):
    """The directory is not a complete flat apt repository; the message says what lacks."""


@dataclass(frozen=True)
class Entry:
    package: str
    filename: str
    size: int


def read_index(repository: Path, text: str) -> list[Entry]:
    """The entries of the index `text`, each checked against the file it names."""
    index = repository / INDEX
    entries = []
    for number, stanza in enumerate(text.split("\n\n"), start=1):
        if not stanza.strip():
            continue
        fields = dict(re.findall(r"^([A-Za-z0-9-]+): ?(.*)$", stanza, re.M))
        missing = {"Package", "Filename", "Size"} - set(fields)
        if missing:
            raise RepositoryError(f"{index}: entry {number} lacks {', '.join(sorted(missing))}")
        entry = Entry(fields["Package"], fields["Filename"], int(fields["Size"]))
        path = (repository / entry.filename).resolve()
        if not path.is_relative_to(repository.resolve()):
            raise RepositoryError(f"{index}: {entry.package}'s {entry.filename} is outside it")
        if not path.is_file() or path.stat().st_size != entry.size:
            raise RepositoryError(
                f"{index}: {entry.package}'s {entry.filename} is missing or not "
                f"{entry.size} bytes: rebuild the index (dpkg-scanpackages)"
            )
        entries.append(entry)
    if not entries:
        raise RepositoryError(f"{index} lists no package")
    return entries


def write_archive(repository: Path, out: Path) -> bool:
    """Pack the repository's index and the files it names into `out` (an uncompressed tar:
    .debs are compressed already), unless `out` already holds this index; returns
    whether it wrote."""
    index = repository / INDEX
    if not index.is_file():
        raise RepositoryError(
            f"{repository}: no {INDEX} index; make it with "
            f"`cd {repository} && dpkg-scanpackages --multiversion . > {INDEX}`"
        )
    raw = index.read_bytes()
    entries = read_index(repository, raw.decode())
    digest = hashlib.sha256(raw).hexdigest()
    stamp = out.with_name(f"{out.name}.index-sha256")
    if out.is_file() and stamp.is_file() and stamp.read_text().strip() == digest:
        return False
    out.parent.mkdir(parents=True, exist_ok=True)
    temporary = out.with_name(f".{out.name}.tmp")
    with tarfile.open(temporary, mode="w", format=tarfile.PAX_FORMAT) as archive:
        add_file(archive, repository / INDEX, f"{ROOT}/{INDEX}")
        for filename in sorted({e.filename.removeprefix("./") for e in entries}):
            add_file(archive, repository / filename, f"{ROOT}/{filename}")
    temporary.replace(out)
    stamp.write_text(digest + "\n")
    return True
