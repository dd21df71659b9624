"""Changes from the console go into the runtime part of the model and through `enmesh apply`.

The runtime part is one model file, `<paths.state>/runtime/console.model.yml`, which
`load_stack` adds to the stack's files in git (so `enmesh apply`, `enmesh render` and the
next `make up` keep it). Precedence: it only adds. A document there whose address or name
the files in git already define is refused by the model's own duplicate check, and the
console deletes only what it added (a git document is deleted in git).

A change is validated by the model validator on the whole desired state (git + runtime +
the change) before anything is written; its problems go back to the form, field by field.
"""

from __future__ import annotations

import copy
import logging
import re
import tempfile
import threading
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from enmesh.compile.layout import standard_broker_name
from enmesh.compile.stack import Stack, load_stack, runtime_dir, runtime_models
from enmesh.control.apply import apply_stack
from enmesh.control.errors import ApplyIncomplete, ApplyRefused
from enmesh.control.putback import put_back_on_failure
from enmesh.control.target import Target
from enmesh.model import Model, Problem, load_model, validate_files

log = logging.getLogger("enmesh.console")

RUNTIME_FILE = "console.model.yml"
ADDRESS_FIELDS = (
    "address",
    "type",
    "plan",
    "ttlSeconds",
    "maxDeliveries",
    "deadLetterAddress",
    "topic",
)
_INTEGERS = {"ttlSeconds", "maxDeliveries"}
GENERAL = ""  # errors that belong to no one field


class ChangeError(Exception):
    """apply refused or failed (the runtime part is back as it was), or applied only in
    part (Keycloak's users not yet; the runtime part is kept, the message says so)."""


_model_cache: dict[str, tuple[tuple[tuple[str, int, int], ...], Model]] = {}
_cache_lock = threading.Lock()


@dataclass(frozen=True)
class Source:
    stack_file: Path
    stack: Stack
    git_models: tuple[Path, ...]

    @classmethod
    def of(cls, stack_file: Path) -> Source:
        stack, _ = load_stack(stack_file)
        git = tuple(stack_file.parent / model for model in stack.spec.models)
        return cls(stack_file, stack, git)

    @property
    def runtime_file(self) -> Path:
        return runtime_dir(self.stack) / RUNTIME_FILE

    def documents(self) -> list[dict[str, Any]]:
        if not self.runtime_file.is_file():
            return []
        loaded = yaml.safe_load_all(self.runtime_file.read_text(encoding="utf-8"))
        return [doc for doc in loaded if isinstance(doc, dict)]

    def model(self) -> Model:
        """The desired state's model, loaded again only when a file of it changed (every
        page needs it; 1,000 addresses take ~100 ms to load)."""
        files = [*self.git_models, *self._runtime_files()]
        key = tuple((str(f), f.stat().st_mtime_ns, f.stat().st_size) for f in files)
        with _cache_lock:
            cached = _model_cache.get("model")
            if cached is not None and cached[0] == key:
                return cached[1]
        model = load_model(files)
        with _cache_lock:
            _model_cache["model"] = (key, model)
        return model

    def _runtime_files(self) -> list[Path]:
        """Every file of the runtime part (the console's and others', such as what
        `enmesh migrate prepare` added), as `load_stack` and `enmesh apply` read it."""
        return runtime_models(self.stack)

    def other_runtime_files(self) -> list[Path]:
        """The runtime part's files that are not the console's own."""
        return [f for f in self._runtime_files() if f != self.runtime_file]

    def added_names(self) -> set[str]:
        """metadata.name of every document the runtime part adds."""
        return {str(doc.get("metadata", {}).get("name")) for doc in self.documents()}


def address_name(space: str, address: str) -> str:
    """The metadata.name the console gives an address: `<space>.<address>`, with what a
    name may not hold (`/` of MQTT-style topics, capitals) as `-`. A clash with another
    name is the model's duplicate check's to report."""
    return f"{space}." + re.sub(r"[^a-z0-9.-]", "-", address.lower())


def user_name(space: str, username: str) -> str:
    """The metadata.name the console gives a user: `<space>.<username>`."""
    return f"{space}.{username}"


def address_document(space: str, form: Mapping[str, str]) -> dict[str, Any]:
    """An Address document from form fields; blank fields are left out, integers that do
    not parse stay text so the model's own message says what is wrong with them."""
    spec: dict[str, Any] = {"addressSpace": space}
    for name in ADDRESS_FIELDS:
        value = form.get(name, "").strip()
        if not value:
            continue
        spec[name] = int(value) if name in _INTEGERS and value.isdigit() else value
    return {
        "apiVersion": "enmesh.io/v1",
        "kind": "Address",
        "metadata": {"name": address_name(space, str(spec.get("address", "")))},
        "spec": spec,
    }


def _dump(documents: list[dict[str, Any]]) -> str:
    header = "# The runtime part of the model, written by enmesh-console (docs/console.md).\n"
    return header + yaml.safe_dump_all(documents, sort_keys=False, explicit_start=True)


USER_FIELDS = ("username", "operations", "addresses")
OPERATIONS = ("send", "recv", "manage")


@dataclass(frozen=True)
class RuleRow:
    """One authorization rule as a form has it: operations ticked, patterns typed."""

    operations: Collection[str]
    addresses: str  # patterns separated by spaces or commas

    @property
    def blank(self) -> bool:
        return not self.operations and not self.addresses.strip()


def _rule(row: RuleRow) -> dict[str, Any]:
    rule: dict[str, Any] = {"operations": [op for op in OPERATIONS if op in row.operations]}
    patterns = row.addresses.replace(",", " ").split()
    if patterns:
        rule["addresses"] = patterns
    return rule


_RULE_FIELD = re.compile(r"^spec\.authorization\[(\d+)\](?:\.(operations|addresses))?")


def rights_errors(
    problems: list[Problem], document_name: str, rows: list[int]
) -> dict[str, list[str]]:
    """Form field (`operations-N`, `addresses-N`: rule row N of the form) -> the model
    validator's messages; `rows[i]` is the form row of the document's i-th rule. A rule
    found wrong as a whole (send without a pattern) is told at its addresses."""
    errors: dict[str, list[str]] = {}
    for problem in problems:
        found = _RULE_FIELD.match(problem.field)
        if problem.document_name == document_name and found and int(found[1]) < len(rows):
            key = f"{found[2] or 'addresses'}-{rows[int(found[1])]}"
            errors.setdefault(key, []).append(problem.message)
        else:
            where = " ".join(filter(None, (problem.document_name, problem.field)))
            errors.setdefault(GENERAL, []).append(f"{where or 'the model'}: {problem.message}")
    return errors


def user_document(space: str, form: Mapping[str, Any]) -> dict[str, Any]:
    """A MessagingUser from the form: one authorization rule, its password in a secret the
    console names `<space>-<username>` (generated by apply, as for any new user)."""
    username = str(form.get("username", "")).strip()
    rule = _rule(RuleRow(form["operations"], str(form.get("addresses", ""))))
    return {
        "apiVersion": "enmesh.io/v1",
        "kind": "MessagingUser",
        "metadata": {"name": user_name(space, username)},
        "spec": {
            "addressSpace": space,
            "username": username,
            "authentication": {
                "passwordSecret": {"name": f"{space}-{username}", "key": "password"}
            },
            "authorization": [rule],
        },
    }


def _form_field(problem: Problem, fields: tuple[str, ...]) -> str:
    name = problem.field.removeprefix("spec.")
    if name.startswith("authorization[0]."):
        name = name.removeprefix("authorization[0].").split("[", 1)[0]
    elif name.startswith("authorization"):
        name = "operations"  # a rule as a whole
    return name if name in fields else GENERAL


def field_errors(
    problems: list[Problem], fields: tuple[str, ...] = ADDRESS_FIELDS
) -> dict[str, list[str]]:
    """Form field -> the model validator's messages for it."""
    errors: dict[str, list[str]] = {}
    first = fields[0]  # the field the document's name is made of
    said = any(p.field == f"spec.{first}" for p in problems)
    for problem in problems:
        if problem.field == "metadata.name":
            if said:
                continue  # the name is made of that field: one message is enough
            key = first
        else:
            key = _form_field(problem, fields)
        message = problem.message if key else f"{problem.field or 'document'}: {problem.message}"
        errors.setdefault(key, []).append(message)
    return errors


def _is(document: dict[str, Any], kind: str, name: str) -> bool:
    return bool(document.get("kind") == kind and document["metadata"]["name"] == name)


class Changes:
    """The console's one way to change the service: edit the runtime part, then apply.
    One change at a time (apply is not meant to run twice at once on a stack)."""

    def __init__(self, stack_file: Path, target: Callable[[], Target]) -> None:
        self.stack_file = stack_file
        self._target = target
        self.lock = threading.Lock()

    def target(self) -> Target:
        """Where apply goes. A stack the console may not change (on Kubernetes, where
        changes are `pulumi up`'s) refuses here, before anything is written."""
        try:
            return self._target()
        except ApplyRefused as exc:
            raise ChangeError(f"nothing changed: {exc}") from exc

    def source(self) -> Source:
        return Source.of(self.stack_file)

    def problems(self, source: Source, documents: list[dict[str, Any]]) -> list[Problem]:
        with tempfile.TemporaryDirectory() as folder:
            candidate = Path(folder) / RUNTIME_FILE
            candidate.write_text(_dump(documents), encoding="utf-8")
            return validate_files([*source.git_models, *source.other_runtime_files(), candidate])

    def create_address(self, space: str, form: Mapping[str, str]) -> dict[str, list[str]]:
        """Validate and apply a new address; returns the errors per field (none: applied)."""
        with self.lock:
            source = self.source()
            documents = [*source.documents(), address_document(space, form)]
            problems = self.problems(source, documents)
            if problems:
                return field_errors(problems)
            self._apply(source, documents, force=())
            return {}

    def create_user(self, space: str, form: Mapping[str, Any]) -> tuple[dict[str, list[str]], str]:
        """Validate and apply a new user; returns the errors per field, or its password
        (generated by apply, shown once)."""
        with self.lock:
            source = self.source()
            document = user_document(space, form)
            documents = [*source.documents(), document]
            problems = self.problems(source, documents)
            if problems:
                return field_errors(problems, USER_FIELDS), ""
            secret = self._secret(document)
            if secret.exists():
                return {GENERAL: [f"a secret {secret.parent.name} exists already"]}, ""
            self._apply(source, documents, force=())
            return {}, secret.read_text(encoding="utf-8").strip()

    def delete_user(self, space: str, username: str) -> None:
        with self.lock:
            source = self.source()
            name = user_name(space, username)
            found = [d for d in source.documents() if _is(d, "MessagingUser", name)]
            if not found:
                raise ChangeError(f"user {username!r} of {space!r} is not in the runtime part")
            documents = [d for d in source.documents() if not _is(d, "MessagingUser", name)]
            self._apply(source, documents, force=())
            self._secret(found[0]).unlink(missing_ok=True)  # a new user of that name gets a new one

    def edit_rights(self, space: str, username: str, rows: list[RuleRow]) -> dict[str, list[str]]:
        """Replace the authorization rules of a user the runtime part added (blank rows
        are left out); returns the errors per form field (none: applied)."""
        with self.lock:
            source = self.source()
            name = user_name(space, username)
            documents = source.documents()
            at = next((i for i, d in enumerate(documents) if _is(d, "MessagingUser", name)), None)
            if at is None:
                raise ChangeError(f"user {username!r} of {space!r} is in git: change it there")
            kept = [n for n, row in enumerate(rows) if not row.blank]
            user = copy.deepcopy(documents[at])
            user["spec"]["authorization"] = [_rule(rows[n]) for n in kept]
            documents[at] = user
            problems = self.problems(source, documents)
            if problems:
                return rights_errors(problems, f"MessagingUser/{name}", kept)
            self._apply(source, documents, force=())
            return {}

    def _secret(self, user: dict[str, Any]) -> Path:
        ref = user["spec"]["authentication"]["passwordSecret"]
        return Path(self.target().secrets_dir) / str(ref["name"]) / str(ref["key"])

    def delete_address(self, space: str, address: str) -> None:
        """Delete an address the runtime part added; its stored messages go with it (the
        user confirmed after seeing their count)."""
        with self.lock:
            source = self.source()
            name = address_name(space, address)
            documents = [d for d in source.documents() if not _is(d, "Address", name)]
            if len(documents) == len(source.documents()):
                raise ChangeError(f"address {address!r} of {space!r} is not in the runtime part")
            self._apply(source, documents, force=(standard_broker_name(space, address),))

    def _apply(
        self, source: Source, documents: list[dict[str, Any]], force: tuple[str, ...]
    ) -> None:
        target = self.target()
        path = source.runtime_file
        incomplete: ApplyIncomplete | None = None
        try:
            with put_back_on_failure([path]):
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(_dump(documents), encoding="utf-8")
                try:
                    apply_stack(self.stack_file, target, force=force, echo=log.info)
                except ApplyIncomplete as exc:  # the routers have it: keep what they run
                    incomplete = exc
        except Exception as exc:
            log.exception("apply failed; the runtime part is back as it was")
            raise ChangeError(f"apply failed, nothing kept: {exc}") from exc
        if incomplete is not None:
            raise ChangeError(f"applied to the routers and brokers, kept: {incomplete}")
