"""The tls role's `enmesh_certificate` module, run by Ansible as the role runs it: once per
host at the same time, delegated to the deployer, for certificates hosts share (the three
nodes of a broker cluster share the broker's). Real openssl."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ROOT / "roles" / "tls" / "library"
ANSIBLE = ROOT / ".venv" / "bin" / "ansible"


def _module(
    directory: Path, certificates: Sequence[Mapping[str, object]], **extra: str
) -> list[str]:
    arguments = {"directory": str(directory), "certificates": certificates, **extra}
    return [
        str(ANSIBLE), "localhost", "-c", "local", "-M", str(LIBRARY),
        "-m", "enmesh_certificate", "-a", json.dumps(arguments),
    ]  # fmt: skip


def _env() -> dict[str, str]:
    return os.environ | {"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}


def _public_key(*args: str) -> str:
    return subprocess.run(["openssl", *args], capture_output=True, text=True, check=True).stdout


def test_hosts_issuing_a_shared_certificate_at_once_get_one_key_and_certificate(
    tmp_path: Path,
) -> None:
    ca = [{"name": "ca", "common_name": "test CA"}]
    subprocess.run(_module(tmp_path, ca), capture_output=True, check=True, env=_env())
    shared = [{"name": "broker-0", "dnsNames": ["broker-0", "192.168.251.11"]}]
    signed_by = {"ca_cert": str(tmp_path / "ca.crt"), "ca_privatekey": str(tmp_path / "ca.key")}
    runs = [
        subprocess.Popen(
            _module(tmp_path, shared, **signed_by),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=_env(),
        )
        for _ in range(4)
    ]
    outputs = [run.communicate(timeout=120)[0] for run in runs]
    assert all(run.returncode == 0 for run in runs), outputs
    # One run issued it; the others waited for it and found it valid.
    assert sum("CHANGED" in output for output in outputs) == 1, outputs
    key, cert = tmp_path / "broker-0.key", tmp_path / "broker-0.crt"
    assert _public_key("pkey", "-in", str(key), "-pubout") == _public_key(
        "x509", "-in", str(cert), "-noout", "-pubkey"
    )
    verified = subprocess.run(
        ["openssl", "verify", "-CAfile", str(tmp_path / "ca.crt"), str(cert)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert verified.returncode == 0, verified.stdout + verified.stderr
