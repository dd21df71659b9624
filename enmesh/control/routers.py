"""Routers: install their files, make them re-read them, and see that they did.

A router re-reads its config, policy files and admission file on SIGHUP and applies the
difference live (enmesh.router.reload): listeners added, removed or moved, addresses,
links, policies, without dropping connections the change does not concern. It reports
the digests of the files it runs (`enmesh_router_config_info{sha256,policy_sha256}`) and
counts reloads by result (`enmesh_router_config_reloads_total{result}`). `converge`
signals a router only when those digests are not the installed files' (so a second
apply does nothing) and waits until it reports them, or fails with its refusal.
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

RELOAD_TIMEOUT = 60.0
_INFO = re.compile(
    r'^enmesh_router_config_info\{[^}]*\bsha256="([0-9a-f]+)",policy_sha256="([0-9a-f]+)"', re.M
)
_RELOADS = re.compile(
    r'^enmesh_router_config_reloads_total\{[^}]*result="(\w+)"[^}]*\} ([0-9.eE+]+)$', re.M
)


class RouterError(RuntimeError):
    """A router did not take its new config; the message says which and why."""


class Signaller(Protocol):
    """How to make one router re-read its config, restart it, or stop it."""

    def reload(self, router: str) -> None: ...

    def restart(self, router: str) -> None: ...

    def stop(self, router: str) -> None: ...


def _run(argv: list[str]) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
    if result.returncode != 0:
        output = (result.stdout + result.stderr).strip()
        raise RouterError(f"{' '.join(argv)} failed ({result.returncode}): {output}")


@dataclass(frozen=True)
class Supervisord:
    """Routers as supervisord programs `enmesh-router-<id>` (hosts without systemd)."""

    config: str = "/etc/supervisor/supervisord.conf"

    def reload(self, router: str) -> None:
        _run(["supervisorctl", "-c", self.config, "signal", "HUP", f"enmesh-router-{router}"])

    def restart(self, router: str) -> None:
        _run(["supervisorctl", "-c", self.config, "restart", f"enmesh-router-{router}"])

    def stop(self, router: str) -> None:
        _run(["supervisorctl", "-c", self.config, "stop", f"enmesh-router-{router}"])


@dataclass(frozen=True)
class Systemd:
    """Routers as systemd units `enmesh-router-<id>.service`."""

    def reload(self, router: str) -> None:
        unit = f"enmesh-router-{router}.service"
        _run(["systemctl", "kill", "--kill-whom=main", "-s", "HUP", unit])

    def restart(self, router: str) -> None:
        _run(["systemctl", "restart", f"enmesh-router-{router}.service"])

    def stop(self, router: str) -> None:
        _run(["systemctl", "stop", f"enmesh-router-{router}.service"])


@dataclass(frozen=True)
class Processes:
    """Routers as plain processes (the test meshes): router id -> pid, and a restarter."""

    pids: Callable[[str], int]
    restarter: Callable[[str], None] | None = None

    def reload(self, router: str) -> None:
        os.kill(self.pids(router), signal.SIGHUP)

    def restart(self, router: str) -> None:
        if self.restarter is None:
            raise RouterError(f"router {router} needs a restart and this target cannot do it")
        self.restarter(router)

    def stop(self, router: str) -> None:
        os.kill(self.pids(router), signal.SIGTERM)


# --- what a router reports ---------------------------------------------------------------


@dataclass(frozen=True)
class Digests:
    config: str | None  # sha256 of the config file's bytes
    policies: str | None  # sha256 of the policy files' bytes, concatenated in name order


@dataclass(frozen=True)
class Reported:
    digests: Digests
    reloads: Mapping[str, int]  # result (ok, failed) -> count


def metrics_text(metrics_url: str) -> str:
    """A router's /metrics page (OSError if it does not answer)."""
    with urllib.request.urlopen(metrics_url, timeout=5) as response:
        return str(response.read().decode())


def read_reported(metrics_url: str) -> Reported:
    text = metrics_text(metrics_url)
    info = _INFO.search(text)
    reloads = {result: int(float(count)) for result, count in _RELOADS.findall(text)}
    return Reported(Digests(info[1], info[2]) if info else Digests(None, None), reloads)


def installed_digests(config: Path, policies: Path) -> Digests:
    """What the router reports once it runs these files (enmesh.router.reload)."""
    digest = hashlib.sha256()
    for path in sorted(policies.glob("*.json")) if policies.is_dir() else []:
        digest.update(path.read_bytes())
    return Digests(hashlib.sha256(config.read_bytes()).hexdigest(), digest.hexdigest())


# --- converging one router ---------------------------------------------------------------


@dataclass(frozen=True)
class RouterFiles:
    """One router on its host: its installed config and policy directory, its metrics."""

    id: str
    config: Path
    policies: Path
    metrics_url: str
    amqp_url: str | None = None  # where its administrator reaches `$management`


def converge(
    router: RouterFiles,
    signaller: Signaller,
    *,
    other_files_changed: bool = False,
    timeout: float = RELOAD_TIMEOUT,
) -> str:
    """Make the router run its installed files; returns `unchanged` or `reloaded`."""
    return converge_all(
        [router], signaller, other_files_changed=other_files_changed, timeout=timeout
    )[router.id]


def converge_all(
    routers: Sequence[RouterFiles],
    signaller: Signaller,
    *,
    other_files_changed: bool = False,
    timeout: float = RELOAD_TIMEOUT,
) -> dict[str, str]:
    """Make every router run its installed files; router id -> `unchanged` or `reloaded`.

    Each router says which config and policies it runs; only those not running the
    installed ones (or all, if `other_files_changed`: the admission file) are signalled,
    all at once, then each is watched until it reports them. Raises RouterError if one
    refused them (it keeps running the old ones)."""
    signalled: list[tuple[RouterFiles, Digests, Mapping[str, int]]] = []
    outcome = {}
    for router in routers:
        wanted = installed_digests(router.config, router.policies)
        before = read_reported(router.metrics_url)
        if before.digests == wanted and not other_files_changed:
            outcome[router.id] = "unchanged"
            continue
        if before.digests == Digests(None, None):
            raise RouterError(
                f"router {router.id} ({router.metrics_url}) does not report the config it "
                "runs: it predates live reload; restart it once (`enmesh up` does after a new "
                "install)"
            )
        signaller.reload(router.id)
        signalled.append((router, wanted, before.reloads))
    for router, wanted, reloads in signalled:
        _wait(router, wanted, reloads, timeout)
        outcome[router.id] = "reloaded"
    return outcome


def _wait(router: RouterFiles, wanted: Digests, before: Mapping[str, int], timeout: float) -> None:
    """Until the router counts one more reload than `before` and reports `wanted`."""
    deadline = time.monotonic() + timeout
    while True:
        now = read_reported(router.metrics_url)
        if now.reloads.get("failed", 0) > before.get("failed", 0):
            raise RouterError(
                f"router {router.id} refused its new config {router.config} and runs the "
                "previous one; the reason is in its log ('reload of ...: failed, nothing "
                "changed: FILE:LINE: ...')"
            )
        if sum(now.reloads.values()) > sum(before.values()) and now.digests == wanted:
            return
        if time.monotonic() > deadline:
            raise RouterError(
                f"router {router.id} did not report config sha256 {wanted.config} within "
                f"{timeout:.0f}s ({router.metrics_url})"
            )
        time.sleep(0.02)


# --- installing files --------------------------------------------------------------------


def install(config_dir: Path, files: Mapping[str, str | None]) -> list[str]:
    """Write (or, for None, delete) files under `config_dir`, each atomically, keeping an
    existing file's owner and mode; returns the relative paths that changed."""
    changed = []
    for relative, text in sorted(files.items()):
        target = config_dir / relative
        if text is None:
            if target.exists():
                target.unlink()
                changed.append(relative)
            continue
        if target.is_file() and target.read_text(encoding="utf-8") == text:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        fresh = target.with_name(f".{target.name}.apply")
        fresh.write_text(text, encoding="utf-8")
        reference = target if target.exists() else target.parent
        status = reference.stat()
        fresh.chmod(status.st_mode & 0o7777 if target.exists() else 0o644)
        if (status.st_uid, status.st_gid) != (os.getuid(), os.getgid()):
            os.chown(fresh, status.st_uid, status.st_gid)
        fresh.replace(target)
        changed.append(relative)
    return changed
