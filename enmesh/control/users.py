"""Users: the desired identities and passwords, and the SASL database updated in place.

The routers' policies name the users (a removed user's connections are closed by the
router when it reloads them); the database holds their passwords, rebuilt into a new file
that replaces the old one in one rename (`enmesh.deploy.sasldb`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from enmesh.control.plan import Change, user_changes
from enmesh.deploy.sasldb import ensure_sasldb, installed_users, read_users
from enmesh.deploy.secrets import ensure_secrets


def desired_users(deployment: dict[str, Any], secrets_dir: Path) -> dict[str, str]:
    return read_users(deployment, secrets_dir)


def plan_users(sasldb: Path, desired: dict[str, str]) -> list[Change]:
    installed = installed_users(sasldb)
    return user_changes(desired, installed.identities, installed.same_password)


def new_secrets(deploy_json: Path, secrets_dir: Path) -> list[str]:
    """Generate the passwords of new users (existing secrets are never overwritten)."""
    return ensure_secrets(deploy_json, secrets_dir)


def apply_users(sasldb: Path, desired: dict[str, str]) -> bool:
    return ensure_sasldb(sasldb, desired)
