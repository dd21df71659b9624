"""The wheelhouse a site's hosts install enmesh from (`pip install --no-index`).

The hosts have no route to PyPI. They run the same Debian 12 and Python 3.11 as this
machine, so wheels built here install there: python-qpid-proton compiled from its sdist
against Cyrus SASL (as the role would on a connected host), enmesh's dependencies, and the
build backend pip needs to install enmesh's source archive. Cached, keyed by pyproject.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.support.sites.base import CACHE_DIR

REPO = Path(__file__).resolve().parents[3]


def wheelhouse(progress: bool = True) -> Path:
    pyproject = REPO / "pyproject.toml"
    data = tomllib.loads(pyproject.read_text())
    wanted = sorted([*data["project"]["dependencies"], *data["build-system"]["requires"]])
    key = hashlib.sha256("\n".join(wanted).encode()).hexdigest()[:16]
    out = CACHE_DIR / f"wheels-{key}"
    if (out / "complete").exists():
        return out
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    if progress:
        print(f"sites: building wheels for the hosts into {out} (proton from its sdist)")
    pip = [sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check"]
    done = subprocess.run(
        [*pip, "--no-binary", "python-qpid-proton", "--wheel-dir", str(out), *wanted],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"pip wheel failed: {done.stderr[-2000:]}")
    (out / "complete").write_text("\n".join(wanted) + "\n")
    return out


if __name__ == "__main__":
    print(wheelhouse())
