"""`enmesh migrate prepare`: the target gets the source's model and its users' passwords,
through `enmesh apply`, so that clients change only the URL they connect to.

- **Model.** Every model document of the source (its files in git and its runtime part)
  that the target lacks, by kind and name, is written to the target's runtime part,
  `<paths.state>/runtime/migrate.model.yml`, where `enmesh apply`, `enmesh render` and
  the next `make up` of the target keep it (`enmesh export` moves it into git). A
  document both have with different contents is a conflict: nothing is written, and the
  conflicts are named.
- **Passwords.** Each messaging user's password secret on the target is made the
  source's (the stack administrator's is each stack's own). The target's routers read
  them at their next login; connections already open stay.
- **Apply.** The target is then applied live: `enmesh apply` on this host, or a site's
  playbook (its runtime part and secrets are the deployer's, `enmesh.migrate.site`). If
  apply fails, the runtime part and the secrets are put back as they were. A second run
  finds nothing to add or copy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from enmesh.compile import load_stack
from enmesh.compile.auth import sasl_identity
from enmesh.compile.stack import runtime_dir
from enmesh.control.apply import apply_stack
from enmesh.control.export import as_yaml, model_documents
from enmesh.control.putback import put_back_on_failure
from enmesh.control.target import Target
from enmesh.deploy.secrets import replace_secret
from enmesh.migrate.ends import MigrateError
from enmesh.migrate.site import Site, apply_site
from enmesh.model import load_model

RUNTIME_FILE = "migrate.model.yml"
HEADER = "# The source stack's model documents this stack lacked (`enmesh migrate prepare`).\n"

Key = tuple[str, str]  # kind, metadata.name


@dataclass
class Prepared:
    added: list[str] = field(default_factory=list)  # "Kind name" of each document written
    passwords: list[str] = field(default_factory=list)  # identities whose password was copied

    def text(self) -> str:
        added = ", ".join(self.added) or "none"
        copied = ", ".join(self.passwords) or "none (all the same already)"
        return f"documents added to the target: {added}\npasswords copied: {copied}"


def _key(document: dict[str, Any]) -> Key:
    return str(document.get("kind")), str((document.get("metadata") or {}).get("name"))


def missing_on_target(
    source: list[dict[str, Any]], target: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The source's documents the target lacks; MigrateError naming every conflict."""
    have = {_key(d): d for d in target}
    conflicts = [" ".join(_key(d)) for d in source if _key(d) in have and have[_key(d)] != d]
    if conflicts:
        raise MigrateError(
            "the target defines these differently from the source (make them the same, in "
            "git or with `enmesh apply`, then run prepare again; nothing was changed): "
            + ", ".join(conflicts)
        )
    return [d for d in source if _key(d) not in have]


class _Password(NamedTuple):
    identity: str  # user@space
    target: Path  # its secret file on the target
    text: str  # its password on the source


def _passwords(source_files: list[Path], source_dir: Path, target_dir: Path) -> list[_Password]:
    """Every messaging user of the source: its password there, its secret on the target."""
    found = []
    for tenant in load_model(source_files).tenants:
        for user in tenant.users:
            ref, identity = user.spec.authentication.passwordSecret, sasl_identity(tenant, user)
            password = _read(source_dir / ref.name / ref.key)
            if password is None:
                raise MigrateError(
                    f"the source has no password for {identity} at "
                    f"{source_dir / ref.name / ref.key}; nothing was changed"
                )
            found.append(_Password(identity, target_dir / ref.name / ref.key, password))
    return found


def _read(path: Path) -> str | None:
    return path.read_text(encoding="utf-8") if path.exists() else None


def prepare(
    source_stack_file: Path,
    target_stack_file: Path,
    target: Target,
    *,
    echo: Callable[[str], None] = print,
) -> Prepared:
    """Prepare a target on this host, applied with `enmesh apply`."""
    return prepare_with(
        source_stack_file,
        target_stack_file,
        target.secrets_dir,
        lambda: apply_stack(target_stack_file, target, echo=echo),
    )


def prepare_site(
    source_stack_file: Path, site: Site, *, echo: Callable[[str], None] = print
) -> Prepared:
    """Prepare a site: its runtime part and secrets on the deployer, then its playbook."""
    return prepare_with(
        source_stack_file, site.stack_file, site.secrets_dir, lambda: apply_site(site, echo)
    )


def prepare_with(
    source_stack_file: Path,
    target_stack_file: Path,
    target_secrets: Path,
    apply: Callable[[], object],
) -> Prepared:
    """Write what the target lacks, then `apply` it (always: a run killed after writing
    applies on the next); a failed apply puts every file back."""
    source_stack, source_files = load_stack(source_stack_file)
    target_stack, target_files = load_stack(target_stack_file)
    missing = missing_on_target(model_documents(source_files), model_documents(target_files))
    source_secrets = Path(source_stack.spec.paths.secrets)
    passwords = _passwords(source_files, source_secrets, target_secrets)
    runtime = runtime_dir(target_stack) / RUNTIME_FILE
    runtime_before = _read(runtime)
    changed = [p for p in passwords if _read(p.target) != p.text]
    with put_back_on_failure([runtime, *(p.target for p in changed)]):
        if missing:
            runtime.parent.mkdir(parents=True, exist_ok=True)
            runtime.write_text((runtime_before or HEADER) + as_yaml(missing), encoding="utf-8")
        for password in changed:
            replace_secret(password.target, password.text.encode("utf-8"))
        apply()
    return Prepared(
        added=[" ".join(_key(d)) for d in missing],
        passwords=sorted(p.identity for p in changed),
    )
