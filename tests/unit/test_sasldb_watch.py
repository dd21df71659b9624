"""`enmesh deploy sasldb --flat-secrets DIR --watch SECONDS`, the router pods' sidecar on
Kubernetes: it builds the SASL database from one Secret mounted whole (`<secret>_<key>`
files) and rebuilds it when `deploy.json` gains a user and the Secret its password, so the
next login of that user succeeds without a new pod. Real saslpasswd2 / sasldblistusers2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from enmesh.deploy.sasldb import flat_secret_key, installed_users
from tests.support.mesh import wait_until

ROOT = Path(__file__).resolve().parents[2]
GOLDEN_DEPLOY = ROOT / "tests" / "golden" / "local" / "deploy.json"


def _listed(sasldb: Path) -> set[str]:
    out = subprocess.run(
        ["sasldblistusers2", "-f", str(sasldb)], capture_output=True, text=True, check=True
    ).stdout
    return {line.split(":", 1)[0] for line in out.splitlines() if ":" in line}


def test_the_sidecar_adds_a_new_user_to_the_database(tmp_path: Path) -> None:
    deployment = json.loads(GOLDEN_DEPLOY.read_text())
    deployment["sasldb"] = str(tmp_path / "state" / "enmesh.sasldb")
    config, users = tmp_path / "config", tmp_path / "users"
    config.mkdir()
    users.mkdir()
    for secret in deployment["secrets"]:
        (users / flat_secret_key(secret["name"], secret["key"])).write_text("pw-" + secret["name"])
    (config / "deploy.json").write_text(json.dumps(deployment))
    sasldb = Path(deployment["sasldb"])
    command = [sys.executable, "-m", "enmesh.cli", "deploy", "sasldb", "--config-dir"]
    sidecar = subprocess.Popen(
        [*command, str(config), "--flat-secrets", str(users), "--watch", "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(sasldb.is_file, 20, "the first database")
        before = _listed(sasldb)
        assert {"admin@enmesh.stack", "device@iot"} <= before and "clerk@acme" not in before

        (users / "acme-clerk_password").write_text("pw-clerk\n")  # the Secret, then the config
        deployment["secrets"].append({"name": "acme-clerk", "key": "password", "path": "-"})
        deployment["users"].append(
            {"identity": "clerk@acme", "space": "acme", "secret": "acme-clerk"}
        )
        (config / ".deploy.json.new").write_text(json.dumps(deployment))
        (config / ".deploy.json.new").replace(config / "deploy.json")

        wait_until(
            lambda: "clerk@acme" in installed_users(sasldb).identities, 20, "the rebuilt database"
        )
        assert _listed(sasldb) == before | {"clerk@acme"}
        assert installed_users(sasldb).same_password("clerk@acme", "pw-clerk") is True
        assert sidecar.poll() is None  # it keeps watching
    finally:
        sidecar.terminate()
        out, err = sidecar.communicate(timeout=10)
    assert "pw-" not in out + err  # no password in its output
