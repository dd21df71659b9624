"""A user's new password, from the console: written to the user's secret, then `enmesh apply`.

The secret file (`<paths.secrets>/<secret>/<key>`) is the one source of a password on
hosts: `make up` and `enmesh apply` build the SASL database from it. So a change writes
that file and applies; apply sees the changed digest, rebuilds the database in place, and
the new password holds for the next login while open connections carry on (as for any
apply). If apply fails, the old password is written back. Users from git and users the
console added are changed alike (the password is not part of the model).
"""

from __future__ import annotations

import logging
from pathlib import Path

from enmesh.console.runtime import ChangeError, Changes
from enmesh.control.apply import apply_stack
from enmesh.control.putback import put_back_on_failure
from enmesh.deploy.secrets import new_secret_value, replace_secret

log = logging.getLogger("enmesh.console")

MIN_LENGTH = 12


def problem(password: str) -> str | None:
    """Why a chosen password cannot be used (None: it can)."""
    if len(password) < MIN_LENGTH:
        return f"at least {MIN_LENGTH} characters"
    if any(not ch.isprintable() for ch in password) or password != password.strip():
        return "printable characters only, no leading or trailing spaces"
    return None


def change_password(changes: Changes, space: str, username: str, chosen: str | None) -> str:
    """Set `username@space`'s password (`chosen`, or a generated one) and apply; returns it."""
    with changes.lock:
        secret = _secret_of(changes, space, username)
        password = chosen if chosen is not None else new_secret_value()
        try:
            with put_back_on_failure([secret]):
                _write(secret, password)
                apply_stack(changes.stack_file, changes.target(), echo=log.info)
        except Exception as exc:
            log.exception("apply failed; the old password of %s@%s stays", username, space)
            raise ChangeError(f"apply failed, the old password stays: {exc}") from exc
        log.info("password of %s@%s changed", username, space)  # never the password
        return password


def _secret_of(changes: Changes, space: str, username: str) -> Path:
    tenant = next((t for t in changes.source().model().tenants if t.name == space), None)
    user = next((u for u in tenant.users if u.spec.username == username), None) if tenant else None
    if user is None:
        raise ChangeError(f"no user {username!r} in {space!r}")
    ref = user.spec.authentication.passwordSecret
    return Path(changes.target().secrets_dir) / ref.name / ref.key


def _write(secret: Path, password: str) -> None:
    replace_secret(secret, (password + "\n").encode("utf-8"))
