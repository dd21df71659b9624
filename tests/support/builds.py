"""Another enmesh build, as an upgrade brings: the checkout's packaged tree unpacked
from its own archive (enmesh deploy bundle), with one packaged file changed."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from enmesh.deploy.bundle import ROOT as ARCHIVE_ROOT
from enmesh.deploy.bundle import build_bundle

CHECKOUT = Path(__file__).resolve().parents[2]
CHANGED_FILE = "enmesh/__init__.py"


def new_build(into: Path, note: str) -> Path:
    """The source tree of a build that differs from the checkout's by `note` (a comment
    in enmesh/__init__.py); pass it to `enmesh deploy bundle --source`."""
    with tarfile.open(fileobj=io.BytesIO(build_bundle(CHECKOUT))) as archive:
        archive.extractall(into, filter="data")
    tree = into / ARCHIVE_ROOT
    changed = tree / CHANGED_FILE
    changed.write_text(changed.read_text() + f"# {note}\n")
    return tree
