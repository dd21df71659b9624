"""The flat apt repository a site's hosts install their Debian packages from
(`enmesh_base_debs`): the hosts have no route to a mirror, and their image has only what
boots a server, so every package the roles want comes from the deployer.

Built the way docs/sites.md tells a user to: apt on this machine (Debian 12, as the hosts)
downloads every package the roles name with all its dependencies, resolved against an
empty package database so nothing this machine happens to have is left out, then
dpkg-scanpackages writes the index. Cached, keyed by the package list and the mirror.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import yaml

from tests.support.sites.base import CACHE_DIR, debian_mirror

REPO = Path(__file__).resolve().parents[3]
# Every list of Debian packages a site host's roles install.
PACKAGE_LISTS = (
    ("roles/enmesh_base/defaults/main.yml", "enmesh_base_router_packages"),
    ("roles/enmesh_base/defaults/main.yml", "enmesh_base_broker_packages"),
    ("roles/spark/defaults/main.yml", "enmesh_spark_packages"),
)


def role_packages(name: str) -> list[str]:
    """One of PACKAGE_LISTS, as its role's defaults give it."""
    path = next(path for path, listed in PACKAGE_LISTS if listed == name)
    return list(yaml.safe_load((REPO / path).read_text())[name])


def wanted_packages() -> list[str]:
    return sorted({package for _, name in PACKAGE_LISTS for package in role_packages(name)})


def _run(argv: list[str], step: str, cwd: Path | None = None) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=cwd)
    if done.returncode != 0:
        raise RuntimeError(f"{step} failed (exit {done.returncode}): {done.stderr[-2000:]}")
    return done.stdout


def repository(progress: bool = True) -> Path:
    """The cached repository directory (its .debs and Packages), built if missing."""
    wanted = wanted_packages()
    key = hashlib.sha256("\n".join([debian_mirror(), *wanted]).encode()).hexdigest()[:16]
    out = CACHE_DIR / f"debs-{key}"
    if (out / "complete").exists():
        return out
    if shutil.which("dpkg-scanpackages") is None:
        raise RuntimeError("dpkg-scanpackages not found: scripts/setup.sh installs dpkg-dev")
    shutil.rmtree(out, ignore_errors=True)
    (out / "partial").mkdir(parents=True)
    if progress:
        print(f"sites: downloading the hosts' Debian packages into {out}", flush=True)
    status = out / "empty-status"
    status.write_text("")
    _run(
        [
            "apt-get", "install", "--download-only", "--yes", "--quiet", "--no-install-recommends",
            "-o", f"Dir::State::status={status}",
            "-o", f"Dir::Cache::archives={out}",
            "-o", "Debug::NoLocking=1",
            *wanted,
        ],
        "apt-get install --download-only (is this machine's apt index current? apt-get update)",
    )  # fmt: skip
    status.unlink()
    shutil.rmtree(out / "partial")
    (out / "lock").unlink(missing_ok=True)
    index = _run(["dpkg-scanpackages", "--multiversion", "."], "dpkg-scanpackages", cwd=out)
    (out / "Packages").write_text(index)
    (out / "complete").write_text("\n".join(wanted) + "\n")
    return out


if __name__ == "__main__":
    print(repository())
