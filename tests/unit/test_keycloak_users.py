"""`enmesh deploy keycloak-users` before it reaches Keycloak: a missing secret."""

from __future__ import annotations

from pathlib import Path

import pytest

from enmesh.deploy.keycloak_users import SecretMissingError, sync_stack_users

ROOT = Path(__file__).resolve().parents[2]


def test_a_missing_secret_stops_the_sync_before_keycloak_is_asked(tmp_path: Path) -> None:
    """Said as a missing secret with its path, not as Keycloak being unreachable; the URL
    points nowhere, so reaching it would fail differently."""
    with pytest.raises(SecretMissingError, match=r"cannot read secret .*/password: .*nothing"):
        sync_stack_users(
            ROOT / "stacks" / "local.stack.yml",
            tmp_path,
            tmp_path / "ca.crt",
            url="https://127.0.0.1:9",
        )
