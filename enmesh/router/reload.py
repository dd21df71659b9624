"""Config reload: on SIGHUP the router re-reads its config file, its policy directory and
its `--admission` file, and applies the difference live (`reconfigure`).

A config that does not load, or a change the running router refuses, is logged with its
`FILE:LINE: ` and changes nothing. Every reload is counted by outcome, and the loaded
files' digests are kept, so a deployer (`enmesh apply`) can wait for the reload it caused
and check which files the router runs: /metrics has
`enmesh_router_config_reloads_total{result="ok|failed"}` and
`enmesh_router_config_info{sha256="...",policy_sha256="..."} 1`.

With `--watch-config SECONDS` the router also reloads by itself when the files' contents
change, the way Kubernetes updates a mounted Secret or ConfigMap: kubelet writes the new
files into a fresh directory and swaps the `..data` symlink, so every path the config
names resolves to the new bytes at once, and no signal can be sent from outside the pod.
The check is a sha256 of the same files every SECONDS (a few KB read; no inotify, which
would need a dependency and a watch on the symlink's directory rather than the file). A
change is reloaded exactly as SIGHUP reloads it; contents the router refused are not
retried until they change again.
"""

from __future__ import annotations

import hashlib
import logging
import signal
from collections import Counter
from pathlib import Path

from enmesh.router.admission import AdmissionSettings, load_admission
from enmesh.router.config import RouterConfig, RouterConfigError, load_router_config
from enmesh.router.reconfigure import LiveConfig, ReconfigureError

log = logging.getLogger("enmesh.router.reload")
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def config_sha256(path: Path) -> str:
    """The sha256 of the config file's bytes (what `sha256sum FILE` prints)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def policy_sha256(config: RouterConfig) -> str:
    """The sha256 of the policyDir's `*.json` files' bytes, concatenated in name order
    (`cat DIR/*.json | sha256sum`); that of nothing without a policyDir."""
    directory = config.policy.policy_dir if config.policy is not None else None
    digest = hashlib.sha256()
    if directory is not None and directory.is_dir():
        for path in sorted(directory.glob("*.json")):
            digest.update(path.read_bytes())
    return digest.hexdigest()


class Reloader:
    def __init__(self, live: LiveConfig, config_path: Path, admission_path: Path | None) -> None:
        self.live = live
        self.config_path = config_path
        self.admission_path = admission_path
        self.results: Counter[str] = Counter({"ok": 0, "failed": 0})
        self.sha256 = config_sha256(config_path)
        self.policy_sha256 = policy_sha256(live.router.config)
        self.admission_sha256 = self._admission_sha256()
        self._pending = False
        self._refused: tuple[str, str, str] | None = None  # digests of files refused

    def install(self) -> None:
        """Reload on SIGHUP. The handler only schedules: the work runs in the loop."""
        signal.signal(signal.SIGHUP, self._on_signal)

    def watch(self, interval: float) -> None:
        """Reload whenever the files' contents change, looked at every `interval` s."""
        loop = self.live.router.loop

        def poll() -> None:
            try:
                now = self._on_disk()
            except OSError:  # a file missing for a moment: look again next time
                now = None
            if now is not None and now != self._loaded() and now != self._refused:
                log.info("config files changed on disk: reloading %s", self.config_path)
                self._refused = None if self.reload() else now
            loop.call_later(interval, poll)

        loop.call_later(interval, poll)

    def _admission_sha256(self) -> str:
        if self.admission_path is None:
            return EMPTY_SHA256
        return config_sha256(self.admission_path)

    def _on_disk(self) -> tuple[str, str, str]:
        return (
            config_sha256(self.config_path),
            policy_sha256(self.live.router.config),
            self._admission_sha256(),
        )

    def _loaded(self) -> tuple[str, str, str]:
        return self.sha256, self.policy_sha256, self.admission_sha256

    def _on_signal(self, _signum: int, _frame: object) -> None:
        if not self._pending:
            self._pending = True
            self.live.router.loop.call_soon(self._reload_now)

    def _reload_now(self) -> None:
        self.reload()

    def reload(self) -> bool:
        """Re-read the files and apply them; True if the router now runs them."""
        self._pending = False
        where = str(self.config_path)
        try:
            digest = config_sha256(self.config_path)
            config = load_router_config(self.config_path)
            admission = (
                load_admission(self.admission_path)
                if self.admission_path is not None
                else AdmissionSettings()
            )
            changes = self.live.apply(config)
        except (RouterConfigError, ReconfigureError) as exc:
            return self._failed(str(exc))
        except OSError as exc:
            return self._failed(f"{where}: cannot read: {exc.strerror}")
        self.live.router.admission.settings = admission
        for warning in config.warnings:
            log.warning("%s", warning)
        for change in changes:
            log.info("reload: %s", change)
        self.sha256, self.policy_sha256 = digest, policy_sha256(config)
        self.admission_sha256 = self._admission_sha256()
        self.results["ok"] += 1
        log.info(
            "reload of %s: ok, %d change%s (sha256 %s)",
            where,
            len(changes),
            "" if len(changes) == 1 else "s",
            digest,
        )
        return True

    def _failed(self, why: str) -> bool:
        self.results["failed"] += 1
        log.error("reload of %s: failed, nothing changed: %s", self.config_path, why)
        return False
