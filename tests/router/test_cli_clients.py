"""`enmesh send` / `enmesh receive` against a running mesh, as a user would run them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.mesh import Mesh

ENMESH = Path(sys.executable).parent / "enmesh"


def _password_file(mesh: Mesh, identity: str, tmp_path: Path) -> Path:
    path = tmp_path / f"{identity}.password"
    path.write_text(mesh.passwords[identity] + "\n")
    path.chmod(0o600)
    return path


def test_receive_then_send_across_routers(full_mesh: Mesh, tmp_path: Path) -> None:
    backend = _password_file(full_mesh, "backend@iot", tmp_path)
    device = _password_file(full_mesh, "device@iot", tmp_path)
    receiver = subprocess.Popen(
        [
            str(ENMESH),
            "receive",
            full_mesh.url(1),
            "telemetry",
            "--user",
            "backend@iot",
            "--password-file",
            str(backend),
            "--count",
            "3",
            "--timeout",
            "60",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # Anycast: the sender gets credit only once the receiver is attached somewhere,
        # so no readiness wait is needed here.
        sent = subprocess.run(
            [
                str(ENMESH),
                "send",
                full_mesh.url(0, tls=True),
                "telemetry",
                "--user",
                "device@iot",
                "--password-file",
                str(device),
                "--ca",
                str(full_mesh.ca),
                "--mechanisms",
                "PLAIN",
                "--count",
                "3",
                "--body",
                "reading {n}",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        out, err = receiver.communicate(timeout=60)
    finally:
        receiver.kill()
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.strip() == "sent 3 to telemetry: 3 accepted"
    assert out.splitlines() == ["reading 0", "reading 1", "reading 2"]
    assert receiver.returncode == 0, err


def test_send_errors_are_readable_and_passwords_stay_off_the_command_line(
    full_mesh: Mesh, tmp_path: Path
) -> None:
    env = {**os.environ, "ENMESH_PASSWORD": "wrong-password"}
    refused = subprocess.run(
        [
            str(ENMESH),
            "send",
            full_mesh.url(0),
            "telemetry",
            "--user",
            "device@iot",
            "--timeout",
            "20",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert refused.returncode == 1
    assert "amqp:unauthorized-access" in refused.stderr and "Traceback" not in refused.stderr
    assert "wrong-password" not in refused.stderr
    no_password = subprocess.run(
        [str(ENMESH), "send", full_mesh.url(0), "telemetry", "--user", "device@iot"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={k: v for k, v in os.environ.items() if k != "ENMESH_PASSWORD"},
    )
    assert no_password.returncode == 1 and "--password-file" in no_password.stderr
