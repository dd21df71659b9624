"""The wheelhouses a site's hosts install enmesh and PySpark from (`pip install --no-index`).

The hosts have no route to PyPI. They run the same Debian 12 and Python 3.11 as this
machine, so wheels built here install there: python-qpid-proton compiled from its sdist
against Cyrus SASL (as the role would on a connected host), enmesh's dependencies, and the
build backend pip needs to install enmesh's source archive; apart, the spark role's
packages (PySpark is 400 MB: only the Spark hosts get it). Each cached, keyed by its list.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

from tests.support.sites.base import CACHE_DIR

REPO = Path(__file__).resolve().parents[3]
SPARK_DEFAULTS = REPO / "roles/spark/defaults/main.yml"


def wheelhouse(progress: bool = True) -> Path:
    """enmesh's dependencies and build backend (every host)."""
    pyproject = REPO / "pyproject.toml"
    data = tomllib.loads(pyproject.read_text())
    wanted = sorted([*data["project"]["dependencies"], *data["build-system"]["requires"]])
    return _build("wheels", wanted, progress)


def spark_wheelhouse(progress: bool = True) -> Path:
    """What the spark role installs (its enmesh_spark_pip_packages), for the Spark hosts."""
    defaults = yaml.safe_load(SPARK_DEFAULTS.read_text())
    return _build("spark-wheels", sorted(defaults["enmesh_spark_pip_packages"]), progress)


def _build(kind: str, wanted: list[str], progress: bool) -> Path:
    key = hashlib.sha256("\n".join(wanted).encode()).hexdigest()[:16]
    out = CACHE_DIR / f"{kind}-{key}"
    if (out / "complete").exists():
        return out
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    if progress:
        print(f"sites: building the hosts' wheels into {out}", flush=True)
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
    print(spark_wheelhouse())
