"""Files changed for an apply go back as they were when the apply fails.

The console (its runtime part, a user's secret) and `enmesh migrate prepare` (the target's
runtime part and secrets) write the desired state, then apply it; if apply refuses or
fails, what they wrote must not stay as a desired state nobody applied.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from enmesh.deploy.secrets import replace_file


@contextmanager
def put_back_on_failure(paths: Iterable[Path]) -> Iterator[None]:
    """Snapshot `paths` (content, mode, owner); on any exception in the block, each is
    put back (or removed if it did not exist) and the exception goes on."""
    before = {path: _snapshot(path) for path in paths}
    try:
        yield
    except BaseException:
        for path, kept in before.items():
            if kept is None:
                path.unlink(missing_ok=True)
            else:
                replace_file(path, kept[0], mode=kept[1])
        raise


def _snapshot(path: Path) -> tuple[bytes, int] | None:
    if not path.exists():
        return None
    return path.read_bytes(), path.stat().st_mode & 0o777
