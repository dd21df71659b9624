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
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from enmesh.compile.identity import deployed_with_keycloak


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


def _read_secret(file: Path, whose: str) -> str:
    try:
        return file.read_text(encoding="utf-8").rstrip("\r\n")
    except OSError as exc:
        raise SasldbError(
            f"secret of {whose} missing: cannot read {file} ({exc.strerror}); "
            "create it (one line, mode 0600) or let the playbook generate it"
        ) from None


def flat_secret_key(name: str, key: str) -> str:
    """`iot-device`, `password` -> `iot-device_password`: one Kubernetes Secret holding
    every user's password, mounted whole (its keys cannot hold `/`; a secret's name cannot
    hold `_`, so the first `_` splits it)."""
    return f"{name}_{key}"


def sasldb_users(deployment: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The messaging users the routers' own database holds: none when Keycloak holds
    them (`identity.provider: keycloak`; the stack administrator is always there)."""
    return [] if deployed_with_keycloak(deployment) else list(deployment["users"])


def read_users(
    deployment: Mapping[str, Any], secrets_dir: Path, *, flat: bool = False
) -> dict[str, str]:
    """Identity -> password for every user of the routers' database, from `<secrets>/<name>/<key>`
    (or `<secrets>/<name>_<key>` if `flat`)."""

    def read(name: str, key: str, whose: str) -> str:
        path = secrets_dir / flat_secret_key(name, key) if flat else secrets_dir / name / key
        return _read_secret(path, whose)

    keys = {s["name"]: s["key"] for s in deployment["secrets"]}
    users = {
        u["identity"]: read(u["secret"], keys[u["secret"]], u["identity"])
        for u in sasldb_users(deployment)
    }
    admin = deployment.get("administrator")  # absent from a deploy.json before it existed
    if admin is not None:
        users[admin["identity"]] = read(admin["secret"], admin["key"], "the stack administrator")
    return users


def _record_path(path: Path) -> Path:
    return path.with_name(path.name + ".users.json")


def _user_digest(salt: str, identity: str, password: str) -> str:
    return hashlib.sha256(f"{salt}\0{identity}\0{password}".encode()).hexdigest()


def write_password_record(path: Path, users: Mapping[str, str]) -> None:
    """Which identities the database holds, each with a salted digest of its password, so
    `enmesh apply` can say whose password changed without reading any password back."""
    salt = secrets.token_hex(16)
    record = {
        "salt": salt,
        "users": {i: _user_digest(salt, i, p) for i, p in sorted(users.items())},
    }
    target = _record_path(path)
    fresh = target.with_name(f".{target.name}.new")
    fresh.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    fresh.chmod(0o600)
    fresh.replace(target)


@dataclass(frozen=True)
class Installed:
    """The identities a database holds; `same_password` is None where it keeps no record."""

    identities: frozenset[str]
    digests: Mapping[str, str]
    salt: str

    def same_password(self, identity: str, password: str) -> bool | None:
        digest = self.digests.get(identity)
        return None if digest is None else digest == _user_digest(self.salt, identity, password)


def installed_users(path: Path) -> Installed:
    """What the database at `path` holds: its record, else `sasldblistusers2`'s list."""
    try:
        record = json.loads(_record_path(path).read_text(encoding="utf-8"))
        users = dict(record["users"])
        return Installed(frozenset(users), users, str(record["salt"]))
    except (OSError, ValueError, KeyError):
        pass
    if not path.is_file():
        return Installed(frozenset(), {}, "")
    listed = subprocess.run(
        ["sasldblistusers2", "-f", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    # Lines are `user@realm: userPassword` (one per stored secret).
    identities = {line.split(":", 1)[0] for line in listed.stdout.splitlines() if ":" in line}
    return Installed(frozenset(identities), {}, "")


def _keep_owner(fresh: Path, old: Path) -> None:
    """A rebuilt database keeps the owner of the one it replaces (the routers' account)."""
    try:
        status = old.stat()
    except FileNotFoundError:
        return
    if (status.st_uid, status.st_gid) != (os.getuid(), os.getgid()):
        os.chown(fresh, status.st_uid, status.st_gid)


def ensure_sasldb(path: Path, users: Mapping[str, str]) -> bool:
    """Make the database at `path` hold exactly `users`; returns whether it changed.

    Cyrus opens the database for every login, so the next login sees the new file: a
    changed password applies to new connections, open ones are not touched."""
    stamp = path.with_name(path.name + ".sha256")
    wanted = _digest(users)
    if path.is_file() and stamp.is_file() and stamp.read_text().strip() == wanted:
        if not _record_path(path).is_file():
            write_password_record(path, users)
        return False
    fresh = path.with_name(f".{path.name}.new")
    fresh.unlink(missing_ok=True)
    write_sasldb(fresh, users)
    _keep_owner(fresh, path)
    fresh.replace(path)
    write_password_record(path, users)
    stamp.write_text(wanted + "\n")
    stamp.chmod(0o600)
    return True


def ensure_from_deployment(config_dir: Path, flat_secrets: Path | None = None) -> tuple[Path, bool]:
    """The host's sasldb from `<config>/deploy.json`; returns its path and whether it changed.
    `flat_secrets`: read the passwords from there, one file per `<name>_<key>`."""
    deployment = json.loads((config_dir / "deploy.json").read_text(encoding="utf-8"))
    path = Path(deployment["sasldb"])
    if flat_secrets is not None:
        users = read_users(deployment, flat_secrets, flat=True)
    else:
        users = read_users(deployment, Path(deployment["paths"]["secrets"]))
    return path, ensure_sasldb(path, users)


def watch_sasldb(config_dir: Path, flat_secrets: Path | None, interval: float) -> None:
    """Rebuild the database whenever deploy.json's users or their passwords change (a
    Kubernetes sidecar: the config and password Secrets are updated in place, and Cyrus
    opens the database at every login, so the router needs no signal). A file missing or
    half-swapped is reported and looked at again next time; this never exits by itself."""
    last_error = ""
    while True:
        time.sleep(interval)
        try:
            path, changed = ensure_from_deployment(config_dir, flat_secrets)
        except (OSError, ValueError, KeyError, SasldbError) as exc:
            if str(exc) != last_error:  # once per distinct problem, not every interval
                print(f"error: {exc}", file=sys.stderr, flush=True)
            last_error = str(exc)
            continue
        last_error = ""
        if changed:
            print(f"changed: {path}", flush=True)
