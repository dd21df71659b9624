"""`enmesh apply`: compile the model, diff it against the running stack, change only that.

Order, so that nothing is ever unreachable on the way: brokers get new queues, exchanges
and policies first (a router's new autoLink finds its queue); then new passwords and the
SASL database; then the routers' files are installed and each router reloads them (new
addresses usable, removed users' connections closed); last, what was removed is deleted
from the brokers (no router links to it any more). A model that does not validate, or a
queue holding messages that would be deleted without `--force`, stops apply before any
change.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from enmesh.auth.admin import KeycloakAdminError
from enmesh.compile import compile_stack_file
from enmesh.compile.artefacts import Artefacts
from enmesh.compile.identity import deployed_with_keycloak
from enmesh.control import brokers, routers, users
from enmesh.control.entities import router_entities
from enmesh.control.errors import ApplyIncomplete, ApplyRefused
from enmesh.control.management import Administrator, ManagementError, confirm_addresses
from enmesh.control.output import render
from enmesh.control.plan import (
    BrokerPlan,
    Change,
    QueueName,
    RouterPlan,
    broker_plan,
    policy_changes,
    router_plan,
)
from enmesh.control.target import Target
from enmesh.deploy.keycloak_users import (
    SecretMissingError,
    describe,
    describe_skipped,
    sync_stack_users,
)
from enmesh.deploy.sasldb import sasldb_users

__all__ = ["ApplyRefused", "StackPlan", "apply_stack", "plan_stack"]

# Installed files apply manages (a broker's rabbitmq.conf needs a restart: `enmesh up`).
_MANAGED = ("routers/", "auth/", "mqtt/", "deploy.json")


def _managed(relative: str) -> bool:
    return relative.startswith(_MANAGED) or relative.endswith(".definitions.json")


def installed_files(config_dir: Path) -> dict[str, str]:
    found = {}
    for path in sorted(config_dir.rglob("*")) if config_dir.is_dir() else []:
        relative = path.relative_to(config_dir).as_posix()
        if path.is_file() and not path.name.startswith(".") and _managed(relative):
            found[relative] = path.read_text(encoding="utf-8")
    return found


@dataclass
class StackPlan:
    stack: str
    routers: list[RouterPlan]
    brokers: list[BrokerPlan]
    users: list[Change]
    files: dict[str, str | None]  # relative path -> new content, None to delete
    desired_definitions: dict[str, dict[str, Any]]  # broker -> definitions
    notes: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.files and not self.users and not any(b.changes for b in self.brokers)

    def text(self) -> str:
        return render(self.stack, self.routers, self.brokers, self.users, self.notes)

    def refusals(self, forced: Iterable[str]) -> list[str]:
        named = set(forced)
        lost = []
        for broker in self.brokers:
            for (vhost, queue), messages in broker.queues_losing_messages():
                if queue not in named and f"{vhost}/{queue}" not in named:
                    lost.append(
                        f"queue {queue} (vhost {vhost}, broker {broker.name}) holds {messages} "
                        f"message(s); apply deletes it only with --force {queue}"
                    )
        return lost


def plan_stack(
    artefacts: Artefacts,
    target: Target,
    desired_users: Mapping[str, str],
    *,
    refresh: bool = False,
) -> StackPlan:
    """`refresh`: read every broker, also where its compiled definitions are unchanged."""
    desired = artefacts.files
    deployment = json.loads(desired["deploy.json"])
    installed = installed_files(target.config_dir)
    files: dict[str, str | None] = {
        rel: text for rel, text in desired.items() if _managed(rel) and installed.get(rel) != text
    }
    files |= {rel: None for rel in installed if rel not in desired}
    prefix = "auth/policies/"
    policies = policy_changes(
        {k: v for k, v in installed.items() if k.startswith(prefix)},
        {k: v for k, v in desired.items() if k.startswith(prefix)},
    )
    router_plans = [
        router_plan(r["id"], installed.get(r["config"]), desired[r["config"]], policies)
        for r in deployment["routers"]
    ]
    notes = []
    known = {r.id for r in target.routers}
    added = [r["id"] for r in deployment["routers"] if r["id"] not in known]
    if added:
        notes.append(f"note: new routers {', '.join(added)} need `enmesh up` (processes to start)")
    broker_plans = []
    definitions = {}
    for ctl in target.brokers:
        rel = f"brokers/{ctl.name}.definitions.json"
        wanted = json.loads(desired[rel])
        definitions[ctl.name] = wanted
        if not refresh and installed.get(rel) == desired[rel]:
            # Installed only once the broker had them: no need to ask it (each rabbitmqctl
            # call starts an Erlang VM, about a second on a busy host).
            broker_plans.append(BrokerPlan(ctl.name))
            continue
        before = json.loads(installed[rel]) if rel in installed else {}
        managed = [str(v["name"]) for v in before.get("vhosts", [])]
        vhosts = {str(v["name"]) for v in wanted.get("vhosts", [])} | set(managed)
        with ThreadPoolExecutor(2) as pool:  # two VMs at once
            actual = pool.submit(brokers.export_definitions, ctl)
            depths = pool.submit(brokers.queue_depths, ctl, vhosts)
            state = broker_plan(ctl.name, actual.result(), wanted, depths.result(), managed)
        broker_plans.append(state)
    user_plan = users.plan_users(target.sasldb, dict(desired_users))
    return StackPlan(
        deployment["stack"], router_plans, broker_plans, user_plan, files, definitions, notes
    )


def _sync_keycloak(
    stack_file: Path, artefacts: Artefacts, target: Target, echo: Callable[[str], None]
) -> bool:
    """On a Keycloak stack, its users and rights live there: after the routers (so a new
    address exists before anyone is granted it), Keycloak gets the model's users."""
    deployment = json.loads(artefacts.files["deploy.json"])
    if not deployed_with_keycloak(deployment):
        return False
    try:
        result = sync_stack_users(stack_file, target.secrets_dir, Path(deployment["ca"]))
    except KeycloakAdminError as error:
        raise ApplyIncomplete(
            f"the routers and brokers are applied, Keycloak's users are not: {error}; "
            "run apply again once Keycloak answers"
        ) from None
    except SecretMissingError as error:
        raise ApplyIncomplete(
            f"the routers and brokers are applied, Keycloak's users are not: {error}; "
            "restore the secret and run apply again"
        ) from None
    echo(f"Keycloak users: {describe(result)}")
    if result.skipped:
        echo(f"Keycloak users: warning: {describe_skipped(result)}")
    return True


def _desired_users(artefacts: Artefacts, target: Target, generate: bool) -> dict[str, str]:
    """Identity -> password; a dry run does not create the secrets of new users (their
    password shows as `?`, they plan as added all the same)."""
    deployment = json.loads(artefacts.files["deploy.json"])
    if generate:
        with tempfile.NamedTemporaryFile("w", suffix=".json") as handle:
            handle.write(artefacts.files["deploy.json"])
            handle.flush()
            users.new_secrets(Path(handle.name), target.secrets_dir)
        return users.desired_users(deployment, target.secrets_dir)

    def read(name: str, key: str) -> str:
        path = target.secrets_dir / name / key
        return path.read_text().rstrip("\r\n") if path.is_file() else "?"

    keys = {s["name"]: s["key"] for s in deployment["secrets"]}
    found = {u["identity"]: read(u["secret"], keys[u["secret"]]) for u in sasldb_users(deployment)}
    admin = deployment.get("administrator")
    if admin is not None:
        found[admin["identity"]] = read(admin["secret"], admin["key"])
    return found


@dataclass
class Result:
    plan: StackPlan
    routers: dict[str, str] = field(default_factory=dict)  # id -> unchanged/reloaded
    seconds: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)  # phase -> seconds


@contextmanager
def _one_apply_at_a_time(config_dir: Path) -> Iterator[None]:
    """An exclusive lock on the installed stack (`enmesh apply`, the console and `enmesh
    migrate prepare` may each apply it; two applies at once would interleave their
    reloads and broker changes). The lock is on the installed files' folder itself, so it
    adds no file there; nothing to lock before the stack is installed."""
    if not config_dir.is_dir():
        yield
        return
    folder = os.open(config_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)
        yield
    finally:
        os.close(folder)  # releases the lock


def apply_stack(
    stack_file: Path,
    target: Target,
    *,
    dry_run: bool = False,
    force: Iterable[str] = (),
    refresh: bool = False,
    echo: Callable[[str], None] = print,
) -> Result:
    with _one_apply_at_a_time(target.config_dir):
        return _apply_stack(
            stack_file, target, dry_run=dry_run, force=force, refresh=refresh, echo=echo
        )


def _apply_stack(
    stack_file: Path,
    target: Target,
    *,
    dry_run: bool,
    force: Iterable[str],
    refresh: bool,
    echo: Callable[[str], None],
) -> Result:
    clock = _Clock()
    _, artefacts = compile_stack_file(stack_file)  # ModelInvalidError: nothing changed
    desired_users = _desired_users(artefacts, target, generate=not dry_run)
    clock.lap("compile")
    plan = plan_stack(artefacts, target, desired_users, refresh=refresh)
    clock.lap("plan")
    echo(plan.text())
    refusals = plan.refusals(force)
    if refusals:
        raise ApplyRefused("nothing changed:\n  " + "\n  ".join(refusals))
    result = Result(plan, phases=clock.phases)
    if dry_run:
        return result
    if plan.empty:
        _sync_keycloak(stack_file, artefacts, target, echo)
        return result
    forced = _forced(plan, force)
    for broker_plan_, ctl in zip(plan.brokers, target.brokers, strict=True):
        brokers.add_and_update(ctl, broker_plan_, plan.desired_definitions[ctl.name], forced)
    clock.lap("brokers (add)")
    if plan.users:
        users.apply_users(target.sasldb, desired_users)
    definitions = {k: v for k, v in plan.files.items() if k.startswith("brokers/")}
    routers.install(
        target.config_dir, {k: v for k, v in plan.files.items() if k not in definitions}
    )
    clock.lap("users and files")
    admission = any(path.startswith("auth/admission") for path in plan.files)
    result.routers = routers.converge_all(
        target.routers, target.signaller, other_files_changed=admission
    )
    clock.lap("routers (reload)")
    _confirm(artefacts, target, result.routers, echo)
    clock.lap("routers (confirm)")
    for broker_plan_, ctl in zip(plan.brokers, target.brokers, strict=True):
        brokers.remove(ctl, broker_plan_, forced)
    routers.install(target.config_dir, definitions)  # the brokers have them now
    clock.lap("brokers (remove)")
    if _sync_keycloak(stack_file, artefacts, target, echo):
        clock.lap("keycloak users")
    result.seconds = clock.total()
    laps = ", ".join(f"{name} {seconds:.2f}s" for name, seconds in clock.phases.items())
    echo(f"applied in {result.seconds:.1f}s ({laps})")
    return result


def _confirm(
    artefacts: Artefacts, target: Target, outcomes: Mapping[str, str], echo: Callable[[str], None]
) -> None:
    """Ask each reloaded router, as the stack administrator, which addresses it serves:
    they must be the compiled ones (the digests it reports say which files it read, this
    says it acted on them). All at once: a login (SCRAM) and four queries take a few
    hundred milliseconds on a busy host."""
    admin = Administrator.of(json.loads(artefacts.files["deploy.json"]), target.secrets_dir)

    def ask(router: routers.RouterFiles) -> str:
        if outcomes[router.id] != "reloaded" or router.amqp_url is None or isinstance(admin, str):
            return f"router {router.id}: {outcomes[router.id]}"
        conf = artefacts.files[router.config.relative_to(target.config_dir).as_posix()]
        entities = router_entities(conf, router.id)
        compiled = frozenset(key for kind, key in entities if kind == "address")
        try:
            found = confirm_addresses(router.amqp_url, admin, compiled)
        except ManagementError as exc:
            raise routers.RouterError(f"router {router.id}: {exc}") from None
        return f"router {router.id}: reloaded; management ({admin.identity}): {found.line()}"

    with ThreadPoolExecutor(max(1, len(target.routers))) as pool:
        for line in pool.map(ask, target.routers):  # in order; the first failure raises
            echo(line)


class _Clock:
    """Seconds spent in each phase, to say where an apply's time goes."""

    def __init__(self) -> None:
        self.started = self.last = time.monotonic()
        self.phases: dict[str, float] = {}

    def lap(self, phase: str) -> None:
        now = time.monotonic()
        self.phases[phase] = round(now - self.last, 3)
        self.last = now

    def total(self) -> float:
        return time.monotonic() - self.started


def _forced(plan: StackPlan, force: Iterable[str]) -> set[QueueName]:
    named = set(force)
    return {
        queue
        for broker in plan.brokers
        for queue in broker.depths
        if queue[1] in named or f"{queue[0]}/{queue[1]}" in named
    }
