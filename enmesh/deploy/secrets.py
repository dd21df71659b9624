"""Generate the stack's missing secrets on the deployer: `<dir>/<secret>/<key>`, mode 0600.

Existing secrets are never overwritten (rotating one is deleting it and deploying
again). Values are 32 random letters and digits; nothing here prints them.
"""

from __future__ import annotations

import json
import os
import secrets
import string
from pathlib import Path

ALPHABET = string.ascii_letters + string.digits
LENGTH = 32


def new_secret_value() -> str:
    return "".join(secrets.choice(ALPHABET) for _ in range(LENGTH))


def ensure_secrets(deploy_json: Path, directory: Path) -> list[str]:
    """Create every secret `deploy.json` references that `directory` lacks; returns them."""
    deployment = json.loads(deploy_json.read_text(encoding="utf-8"))
    created = []
    for ref in deployment["secrets"]:
        path = directory / ref["name"] / ref["key"]
        if path.exists():
            continue
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        value = new_secret_value()
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(value + "\n")
        created.append(f"{ref['name']}/{ref['key']}")
    return created


def replace_secret(secret: Path, content: bytes) -> None:
    """Replace a secret file in one rename: mode 0600 in a 0700 folder, keeping the owner
    and group of the file it replaces (a reader such as the routers' group keeps access)."""
    replace_file(secret, content, mode=0o600)


def replace_file(path: Path, content: bytes, *, mode: int) -> None:
    """Replace `path` in one rename with `mode`, in a 0700 folder if it makes one, keeping
    the owner and group of the file it replaces."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    owner = path.stat() if path.exists() else None
    temporary = path.with_name(f".{path.name}.new")
    temporary.unlink(missing_ok=True)  # a leftover of an interrupted write, whatever its mode
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(descriptor, "wb") as handle:
        os.fchmod(handle.fileno(), mode)  # whatever the umask
        handle.write(content)
    if owner is not None:
        os.chown(temporary, owner.st_uid, owner.st_gid)
    temporary.replace(path)
