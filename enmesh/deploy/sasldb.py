"""Build the routers' Cyrus SASL database from `deploy.json` and the secrets on a host.

Idempotent: a stamp next to the database (mode 0600) holds a digest of every identity
and password; the database is rebuilt only when that digest changes, into a new file
that replaces the old one in one rename, so a router never reads a half-written
database. Passwords reach `saslpasswd2` on stdin only and appear in no message.

Identities are `<username>@<space>`: stored as user `<username>` in realm `<space>`
(`saslpasswd2 -u <space>`); a client sends the whole identity and Cyrus splits it at
the last `@` (verified in tests/support_selftest).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any


class SasldbError(RuntimeError):
    """The database could not be built; the message says which identity or file."""


def split_identity(identity: str) -> tuple[str, str]:
    """`device@iot` -> (`device`, `iot`); both parts must be non-empty."""
    user, sep, realm = identity.rpartition("@")
    if not sep or not user or not realm:
        raise ValueError(f"identity must be <username>@<realm>, got {identity!r}")
    return user, realm


def write_sasldb(path: Path, users: Mapping[str, str]) -> None:
    """Create or add to the sasldb at `path` with these identities and passwords."""
    if shutil.which("saslpasswd2") is None:
        raise SasldbError("saslpasswd2 not found: install the Debian package sasl2-bin")
    path.parent.mkdir(parents=True, exist_ok=True)
    for identity, password in sorted(users.items()):
        user, realm = split_identity(identity)
        if "\n" in password or not password:
            raise SasldbError(f"the password of {identity} must be non-empty and one line")
        result = subprocess.run(
            ["saslpasswd2", "-f", str(path), "-c", "-p", "-u", realm, user],
            input=password,
            capture_output=True,
            text=True,
            check=False,
            umask=0o077,
            timeout=30,
        )
        if result.returncode != 0:
            raise SasldbError(
                f"saslpasswd2 for {identity} failed ({result.returncode}): {result.stderr.strip()}"
            )
    path.chmod(0o600)


def _digest(users: Mapping[str, str]) -> str:
    digest = hashlib.sha256(b"enmesh-sasldb-v1\0")
    for identity, password in sorted(users.items()):
        digest.update(identity.encode() + b"\0" + password.encode() + b"\0")
    return digest.hexdigest()


def read_users(deployment: Mapping[str, Any], secrets_dir: Path) -> dict[str, str]:
    """Identity -> password for every user in `deploy.json`, from `<secrets>/<name>/<key>`."""
    users: dict[str, str] = {}
    secrets = {s["name"]: s for s in deployment["secrets"]}
    for user in deployment["users"]:
        ref = secrets[user["secret"]]
        file = secrets_dir / ref["name"] / ref["key"]
        try:
            password = file.read_text(encoding="utf-8").rstrip("\r\n")
        except OSError as exc:
            raise SasldbError(
                f"secret of {user['identity']} missing: cannot read {file} ({exc.strerror}); "
                "create it (one line, mode 0600) or let the playbook generate it"
            ) from None
        users[user["identity"]] = password
    return users


def ensure_sasldb(path: Path, users: Mapping[str, str]) -> bool:
    """Make the database at `path` hold exactly `users`; returns whether it changed."""
    stamp = path.with_name(path.name + ".sha256")
    wanted = _digest(users)
    if path.is_file() and stamp.is_file() and stamp.read_text().strip() == wanted:
        return False
    fresh = path.with_name(f".{path.name}.new")
    fresh.unlink(missing_ok=True)
    write_sasldb(fresh, users)
    fresh.replace(path)
    stamp.write_text(wanted + "\n")
    stamp.chmod(0o600)
    return True


def ensure_from_deployment(config_dir: Path) -> tuple[Path, bool]:
    """The host's sasldb from `<config>/deploy.json`; returns its path and whether it changed."""
    deployment = json.loads((config_dir / "deploy.json").read_text(encoding="utf-8"))
    path = Path(deployment["sasldb"])
    users = read_users(deployment, Path(deployment["paths"]["secrets"]))
    return path, ensure_sasldb(path, users)
