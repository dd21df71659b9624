"""Keycloak on hosts before it runs: `enmesh deploy keycloak-users` with a missing secret,
and unpacking Keycloak's archive."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from enmesh.deploy import keycloak_dist
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


def test_the_keycloak_archive_may_not_write_outside_its_directory(tmp_path: Path) -> None:
    """Checked by enmesh itself: Debian 12's Python (3.11.2) has no extraction filters."""
    archive = tmp_path / "evil.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        link = tarfile.TarInfo("keycloak/bin/escape")
        link.type, link.linkname = tarfile.SYMTYPE, "../../../etc/passwd"
        tar.addfile(link)
    with pytest.raises(RuntimeError, match="'keycloak/bin/escape' points outside it"):
        keycloak_dist._extract(archive, tmp_path / "staging")
    assert not (tmp_path / "staging").exists()


def test_a_cached_archive_of_a_known_release_is_checked_without_the_network(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An air-gapped host: the deployer copied the archive into the cache; its SHA-1 is
    the one recorded for the release, so no request is made. A damaged copy is not used:
    fetching a good one needs the network, and here that fails loudly."""
    archive = tmp_path / "keycloak-quarkus-dist-0.0.1.tar.gz"
    archive.write_bytes(b"the release")
    monkeypatch.setitem(keycloak_dist.KNOWN_SHA1, "0.0.1", keycloak_dist._sha1(archive))

    def offline(*args: object, **kwargs: object) -> None:
        raise OSError("no network on this host")

    monkeypatch.setattr(keycloak_dist.urllib.request, "urlopen", offline)
    assert keycloak_dist.fetch("0.0.1", tmp_path) == archive
    archive.write_bytes(b"damaged in transit")
    with pytest.raises(OSError, match="no network"):
        keycloak_dist.fetch("0.0.1", tmp_path)
