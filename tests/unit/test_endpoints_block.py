"""The endpoints block `enmesh up` prints (issue 29, items 4 and 6): one CA path, the one
clients use, and which password file is whose."""

from __future__ import annotations

import json
from pathlib import Path

from enmesh.deploy.stackctl import describe

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "local"
ENDPOINTS = {"ca": "/var/lib/enmesh/pki/ca.crt", "secrets": "/etc/enmesh/secrets"}


def _block() -> str:
    deployment = json.loads((GOLDEN / "deploy.json").read_text(encoding="utf-8"))
    return describe(ENDPOINTS, deployment, GOLDEN)


def test_every_user_is_listed_with_its_password_file() -> None:
    lines = _block().splitlines()
    start = lines.index("Users and their password files (mode 0600, on the deployer):")
    assert lines[start + 1 : start + 4] == [
        "  app@acme     /etc/enmesh/secrets/acme-app/password",
        "  backend@iot  /etc/enmesh/secrets/iot-backend/password",
        "  device@iot   /etc/enmesh/secrets/iot-device/password",
    ]
    assert "<secret>" not in "\n".join(lines)


def test_one_ca_path_the_installed_copy_not_the_pki_directory() -> None:
    block = _block()
    assert "CA certificate for clients (--ca): /var/lib/enmesh/tls/ca.crt" in block
    assert "/pki/" not in block  # the deployer's directory, where ca.key lives
    try_it = [line for line in block.splitlines() if "enmesh send" in line or "receive" in line]
    assert try_it and all("--ca /var/lib/enmesh/tls/ca.crt" in line for line in try_it)
