"""The Debian 12 root filesystem every site host boots from, built once and cached.

debootstrap (minbase) from the same mirror apt uses on this machine, plus systemd, dbus,
openssh-server, python3 and sudo so the host boots systemd as PID 1 and is reachable like
any server. Nothing the roles install is in it: the hosts have no route to any registry
(air-gapped, as many real sites are), so the roles install their Debian packages from the
deployer's apt repository (tests/support/sites/debs.py, `enmesh_base_debs`). The cache is
keyed by suite, mirror and package list: a changed list builds a new base, an unchanged
one is reused (a few seconds to check).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

SUITE = "bookworm"
CACHE_DIR = Path(os.environ.get("ENMESH_SITES_CACHE", "/var/cache/enmesh-sites"))
BOOT_PACKAGES = (
    "dbus",
    "iproute2",
    "openssh-server",
    "python3",
    "sudo",
    "systemd",
    "systemd-sysv",
)
_SOURCES = (Path("/etc/apt/sources.list"), Path("/etc/apt/sources.list.d"))


class BaseError(RuntimeError):
    """The base image could not be built; the message says which step and what to do."""


def debian_mirror(sources: tuple[Path, ...] = _SOURCES) -> str:
    """The Debian mirror apt uses here (deb822 `URIs:` or one-line `deb URL suite`)."""
    files: list[Path] = []
    for src in sources:
        if src.is_dir():
            files += sorted(src.iterdir())
        elif src.is_file():
            files.append(src)
    for path in files:
        text = path.read_text(errors="replace")
        for match in re.finditer(r"^URIs:\s*(\S+)", text, re.M):
            if "security" not in match.group(1) and "/debian" in match.group(1):
                return match.group(1)
        for match in re.finditer(rf"^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+{SUITE}\s", text, re.M):
            if "security" not in match.group(1):
                return match.group(1)
    raise BaseError(f"no Debian {SUITE} mirror found in /etc/apt/sources.list*: add one")


def cache_key(mirror: str) -> str:
    text = "\n".join([SUITE, mirror, *sorted(BOOT_PACKAGES)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _run(argv: list[str], step: str, log: Path) -> None:
    with log.open("a") as out:
        out.write(f"$ {' '.join(argv)}\n")
        out.flush()
        done = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise BaseError(f"{step} failed (exit {done.returncode}); log {log}:\n{tail}")


@contextlib.contextmanager
def _cache_locked() -> Iterator[None]:
    """One builder of the cache at a time: make test runs the site scenario beside pytest,
    whose harness checks create a host of their own from the same base."""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with (CACHE_DIR / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def ensure_base(progress: bool = True) -> Path:
    """Return the cached root filesystem, building it first if the key changed."""
    mirror = debian_mirror()
    root = CACHE_DIR / f"{SUITE}-{cache_key(mirror)}"
    with _cache_locked():
        if not (root / "complete").exists():
            _build_base(mirror, root, progress)
    return root / "rootfs"


def _build_base(mirror: str, root: Path, progress: bool) -> None:
    rootfs = root / "rootfs"
    for tool in ("debootstrap", "chroot"):
        if shutil.which(tool) is None:
            raise BaseError(f"{tool} not found: run scripts/setup.sh (it installs debootstrap)")
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    log = root / "build.log"
    if progress:
        print(f"sites: building the {SUITE} base from {mirror} into {rootfs} (log {log})")
    _run(
        [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(BOOT_PACKAGES)}",
            SUITE,
            str(rootfs),
            mirror,
        ],
        "debootstrap",
        log,
    )
    _first_boot_identity(rootfs)
    (root / "complete").write_text(mirror + "\n")


def _first_boot_identity(rootfs: Path) -> None:
    # Hosts boot with their own machine-id and SSH host keys (made at first boot).
    (rootfs / "etc/machine-id").write_text("")
    for key in (rootfs / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
