"""`enmesh send` / `enmesh receive` say what was wrong and what to try when a newcomer
makes the usual transport and address mistakes (issue 29, items 2 and 7): each case
used to print a raw proton condition. Real routers, the installed console script."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.mesh import Mesh

ENMESH = Path(sys.executable).parent / "enmesh"


def _enmesh(*args: str, password: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ENMESH), *args, "--password-file", str(password), "--timeout", "15"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


@pytest.fixture
def password(full_mesh: Mesh, tmp_path: Path) -> Path:
    path = tmp_path / "device.password"
    path.write_text(full_mesh.passwords["device@iot"] + "\n")
    path.chmod(0o600)
    return path


def _swap_scheme(url: str, scheme: str) -> str:
    return scheme + "://" + url.split("://", 1)[1]


def _failure(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result.stdout
    assert "Traceback" not in result.stderr
    return result.stderr


def test_plain_amqp_to_the_tls_port(full_mesh: Mesh, password: Path) -> None:
    url = _swap_scheme(full_mesh.url(0, tls=True), "amqp")
    err = _failure(_enmesh("send", url, "telemetry", "--user", "device@iot", password=password))
    hostport = url.split("://", 1)[1]
    assert f"probably a TLS port; use amqps://{hostport} with --ca FILE" in err, err


def test_amqps_to_the_plain_port(full_mesh: Mesh, password: Path) -> None:
    url = _swap_scheme(full_mesh.url(0), "amqps")
    err = _failure(
        _enmesh("send", url, "telemetry", "--user", "device@iot", "--ca", str(full_mesh.ca),
                password=password)
    )  # fmt: skip
    hostport = url.split("://", 1)[1]
    assert f"does not speak TLS: it is probably a plain port; use amqp://{hostport}" in err, err


def test_plain_mechanism_without_tls(full_mesh: Mesh, password: Path) -> None:
    err = _failure(
        _enmesh("send", full_mesh.url(0), "telemetry", "--user", "device@iot",
                "--mechanisms", "PLAIN", password=password)
    )  # fmt: skip
    assert "the server offers it only over TLS" in err and "SCRAM-SHA-256" in err, err


def test_amqps_without_the_ca(full_mesh: Mesh, password: Path) -> None:
    url = full_mesh.url(0, tls=True)
    err = _failure(_enmesh("send", url, "telemetry", "--user", "device@iot", password=password))
    assert "signed by a CA this client does not trust: pass --ca" in err, err


def test_unknown_address_is_not_a_permission_problem(full_mesh: Mesh, tmp_path: Path) -> None:
    """`audit` is the subscription's model name; clients name it `alerts::audit`."""
    backend = tmp_path / "backend.password"
    backend.write_text(full_mesh.passwords["backend@iot"] + "\n")
    err = _failure(
        _enmesh("receive", full_mesh.url(0), "audit", "--user", "backend@iot", "--count", "1",
                password=backend)
    )  # fmt: skip
    assert "amqp:not-found" in err, err
    assert "no address 'audit' in address space 'iot'; did you mean 'alerts::audit'?" in err
    assert "no permission" not in err
    # An address that exists but is not the user's is still "not allowed".
    device = tmp_path / "device.password"
    device.write_text(full_mesh.passwords["device@iot"] + "\n")
    denied = _failure(
        _enmesh("receive", full_mesh.url(0), "telemetry", "--user", "device@iot", "--count", "1",
                password=device)
    )  # fmt: skip
    assert "amqp:unauthorized-access" in denied
    assert "no permission to receive from 'telemetry'" in denied
