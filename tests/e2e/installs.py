"""Whether a supervised process runs the current enmesh install (it imports enmesh once)."""

from __future__ import annotations

from typing import Any

INSTALLED = "/opt/enmesh/installed.sha1"  # enmesh_base records the archive it installed


def started_after_install(host: Any, pid: int) -> bool:
    """True if process `pid` started after the last install (1 s of clock slack)."""
    installed_at = int(host.check_output(f"stat -c %Y {INSTALLED}"))
    now = int(host.check_output("date +%s"))
    running_for = int(host.check_output(f"ps -o etimes= -p {pid}").strip())
    return now - running_for >= installed_at - 1
