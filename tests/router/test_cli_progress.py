"""`enmesh simulate` shows progress while it runs (issue 29, item 10): it used to print
nothing until the end. Real routers, the installed console script."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.support.mesh import Mesh

ENMESH = Path(sys.executable).parent / "enmesh"


def _password(mesh: Mesh, identity: str, tmp_path: Path) -> Path:
    path = tmp_path / f"{identity}.password"
    path.write_text(mesh.passwords[identity] + "\n")
    return path


def test_simulate_prints_sent_accepted_and_rate(full_mesh: Mesh, tmp_path: Path) -> None:
    readings = 2 * 4 * 3  # devices x rate x duration
    auth = ["--timeout", "60", "--password-file"]
    receiver = subprocess.Popen(
        [str(ENMESH), "receive", full_mesh.url(1), "telemetry", "--user", "backend@iot",
         "--count", str(readings), *auth, str(_password(full_mesh, "backend@iot", tmp_path))],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        # anycast: no credit until the receiver is attached, so no readiness wait here
        result = subprocess.run(
            [str(ENMESH), "simulate", full_mesh.url(0), "telemetry", "--user", "device@iot",
             "--devices", "2", "--rate", "4", "--duration", "3", "--progress", "1",
             *auth, str(_password(full_mesh, "device@iot", tmp_path))],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    finally:
        receiver.wait(60)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0] == f"sending {readings} readings of 2 devices to telemetry at 8/s; " + (
        "progress every 1 s"
    )
    line = re.compile(rf"  \d+/{readings} sent, \d+ accepted, \d+/s")
    progress = [text for text in lines[1:] if line.fullmatch(text)]
    assert progress, result.stderr
    assert result.stdout.startswith(f"sent {readings} readings of 2 devices to telemetry")
