"""`enmesh deploy keycloak-users`: the model's users and rights into Keycloak, on the
deployer (it holds the stack and model files and the secrets), through Keycloak's admin
API (enmesh.auth.sync). The Keycloak role runs it once Keycloak answers; `enmesh apply`
runs it on every model change of a Keycloak stack.

A password is never read back from Keycloak, so which ones changed is told by a record of
salted digests beside the secrets (as for the routers' SASL database): a user whose secret
changed since the last run gets its password set again.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from enmesh.auth.admin import KeycloakAdmin, KeycloakAdminError
from enmesh.auth.realm import ConsoleClient
from enmesh.auth.sync import SyncResult, sync_realm, sync_wanted, wanted_of_export
from enmesh.compile import console, load_stack
from enmesh.compile.auth import sasl_identity
from enmesh.compile.identity import (
    CONSOLE_SECRET,
    KEYCLOAK_ADMIN_SECRET,
    LOOKUP_SECRET,
    keycloak_url,
)
from enmesh.compile.layout import Layout
from enmesh.deploy.sasldb import installed_users, write_password_record
from enmesh.model import load_model

ADMIN_USER = "admin"  # Keycloak's bootstrap administrator (the role creates it)
RECORD = ".keycloak"  # `<secrets>/.keycloak.users.json`: digests of the passwords set


class SecretMissingError(Exception):
    """A secret the sync needs is not on the deployer: nothing was sent to Keycloak."""


def _read(secrets_dir: Path, name: str, key: str) -> str:
    path = secrets_dir / name / key
    try:
        return path.read_text(encoding="utf-8").rstrip("\r\n")
    except OSError as error:
        raise SecretMissingError(
            f"cannot read secret {path}: {error.strerror}; nothing was sent to Keycloak"
        ) from None


def sync_stack_users(
    stack_file: Path, secrets_dir: Path, ca_file: Path, url: str | None = None
) -> SyncResult:
    """Make the stack's Keycloak hold its model's users; `url` overrides the stack's."""
    stack, model_files = load_stack(stack_file)
    model = load_model(model_files)
    layout = Layout(stack, model)
    passwords: dict[str, str] = {}  # secret name -> password, as the sync takes them
    by_identity: dict[str, str] = {}  # identity -> password, for the record
    for tenant in model.tenants:
        for user in tenant.users:
            ref = user.spec.authentication.passwordSecret
            passwords[ref.name] = _read(secrets_dir, ref.name, ref.key)
            by_identity[sasl_identity(tenant, user)] = passwords[ref.name]
    record = secrets_dir / RECORD
    known = installed_users(record)
    reset = {i for i, p in by_identity.items() if known.same_password(i, p) is False}
    admin = KeycloakAdmin(
        url or keycloak_url(layout),
        str(ca_file),
        ADMIN_USER,
        _read(secrets_dir, *KEYCLOAK_ADMIN_SECRET),
    )
    result = sync_realm(
        admin,
        model,
        passwords,
        reset=reset,
        lookup_secret=_read(secrets_dir, *LOOKUP_SECRET),
        console=_console_client(layout, secrets_dir),
    )
    write_password_record(record, by_identity)
    return result


def _console_client(layout: Layout, secrets_dir: Path) -> ConsoleClient | None:
    """The console's OIDC client, where the stack runs a console."""
    where = console.settings(layout)
    if where is None:
        return None
    url = f"https://{where['host']}:{where['port']}"
    return ConsoleClient(_read(secrets_dir, *CONSOLE_SECRET), url)


def describe(result: SyncResult) -> str:
    if result.imported:
        return "changed: realm imported"
    if result.unchanged:
        return "unchanged"
    parts = [
        f"{what}: {', '.join(names)}"
        for what, names in (
            ("created", result.created),
            ("changed", result.changed),
            ("removed", result.removed),
        )
        if names
    ]
    return "changed: " + "; ".join(parts)


def describe_skipped(result: SyncResult) -> str:
    """Users of the model that Keycloak already has, made there by hand: left alone."""
    if not result.skipped:
        return ""
    return (
        f"left alone, made in Keycloak by hand (their passwords and groups are Keycloak's, "
        f"not the model's): {', '.join(result.skipped)}"
    )


def _report(sync: Callable[[], SyncResult]) -> int:
    """Run a sync and say what it did (a step's output and exit code)."""
    try:
        result = sync()
    except (KeycloakAdminError, SecretMissingError) as error:
        print(f"error: {error}", flush=True)
        return 1
    print(describe(result), flush=True)
    if result.skipped:
        print(f"warning: {describe_skipped(result)}", flush=True)
    return 0


def _run(args: argparse.Namespace) -> int:
    return _report(lambda: sync_stack_users(args.stack, args.secrets, args.ca, args.url))


def sync_realm_file(realm_file: Path, url: str, ca_file: Path, admin_password: str) -> SyncResult:
    """Make Keycloak hold a realm export (the Kubernetes program's realm Secret): imported
    where the realm is missing, else its managed groups and users aligned. No record of
    earlier passwords exists there, so every managed user's password is set again; this
    runs when the export changed, and a remembered login then needs one password grant."""
    try:
        export = json.loads(realm_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise SecretMissingError(f"cannot read the realm {realm_file}: {error}") from None
    wanted = wanted_of_export(export)
    admin = KeycloakAdmin(url, str(ca_file), ADMIN_USER, admin_password)
    return sync_wanted(admin, wanted, reset=set(wanted.users))


def _run_realm(args: argparse.Namespace) -> int:
    password = os.environ.get(args.admin_password_env, "")
    if not password:
        print(f"error: no Keycloak admin password in ${args.admin_password_env}", flush=True)
        return 1
    return _report(lambda: sync_realm_file(args.realm_file, args.url, args.ca, password))


def add_step(steps: Any) -> None:
    step = steps.add_parser(
        "keycloak-users", help="make the stack's Keycloak hold its model's users and rights"
    )
    step.add_argument("--stack", type=Path, required=True, metavar="FILE", help="stack file")
    step.add_argument("--secrets", type=Path, required=True, metavar="DIR")
    step.add_argument("--ca", type=Path, required=True, metavar="FILE", help="the stack's CA")
    step.add_argument("--url", metavar="URL", help="Keycloak's https URL (default: the stack's)")
    step.set_defaults(run=_run)
    realm = steps.add_parser(
        "keycloak-realm",
        help="make Keycloak hold a realm export (the Kubernetes stacks' sync Job runs it)",
    )
    realm.add_argument("--realm-file", type=Path, required=True, metavar="FILE")
    realm.add_argument("--url", required=True, metavar="URL", help="Keycloak's https URL")
    realm.add_argument("--ca", type=Path, required=True, metavar="FILE", help="the stack's CA")
    realm.add_argument(
        "--admin-password-env",
        default="KEYCLOAK_ADMIN_PASSWORD",
        metavar="NAME",
        help="environment variable holding the bootstrap administrator's password",
    )
    realm.set_defaults(run=_run_realm)
