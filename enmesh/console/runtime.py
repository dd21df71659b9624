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

import logging
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from enmesh.compile.layout import standard_broker_name
from enmesh.compile.stack import Stack, load_stack, runtime_dir
from enmesh.control.apply import apply_stack
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
    """apply refused or failed; the runtime part is back as it was."""


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
        return load_model([*self.git_models, *self._runtime_files()])

    def _runtime_files(self) -> list[Path]:
        return [self.runtime_file] if self.runtime_file.is_file() else []

    def added_names(self) -> set[str]:
        """metadata.name of every document the runtime part adds."""
        return {str(doc.get("metadata", {}).get("name")) for doc in self.documents()}


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
        "metadata": {"name": f"{space}.{spec.get('address', '')}"},
        "spec": spec,
    }


def _dump(documents: list[dict[str, Any]]) -> str:
    header = "# The runtime part of the model, written by enmesh-console (docs/console.md).\n"
    return header + yaml.safe_dump_all(documents, sort_keys=False, explicit_start=True)


def field_errors(problems: list[Problem]) -> dict[str, list[str]]:
    """Form field -> the model validator's messages for it."""
    errors: dict[str, list[str]] = {}
    address_said = any(p.field == "spec.address" for p in problems)
    for problem in problems:
        name = problem.field.removeprefix("spec.")
        if name == "metadata.name":
            if address_said:
                continue  # the name is made of the address: one message is enough
            name = "address"
        key = name if name in ADDRESS_FIELDS else GENERAL
        message = problem.message if key else f"{problem.field or 'document'}: {problem.message}"
        errors.setdefault(key, []).append(message)
    return errors


class Changes:
    """The console's one way to change the service: edit the runtime part, then apply.
    One change at a time (apply is not meant to run twice at once on a stack)."""

    def __init__(self, stack_file: Path, target: Callable[[], Target]) -> None:
        self.stack_file = stack_file
        self.target = target
        self.lock = threading.Lock()

    def source(self) -> Source:
        return Source.of(self.stack_file)

    def problems(self, source: Source, documents: list[dict[str, Any]]) -> list[Problem]:
        with tempfile.TemporaryDirectory() as folder:
            candidate = Path(folder) / RUNTIME_FILE
            candidate.write_text(_dump(documents), encoding="utf-8")
            return validate_files([*source.git_models, candidate])

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

    def delete_address(self, space: str, address: str) -> None:
        """Delete an address the runtime part added; its stored messages go with it (the
        user confirmed after seeing their count)."""
        with self.lock:
            source = self.source()
            name = f"{space}.{address}"
            documents = [d for d in source.documents() if d["metadata"]["name"] != name]
            if len(documents) == len(source.documents()):
                raise ChangeError(f"address {address!r} of {space!r} is not in the runtime part")
            self._apply(source, documents, force=(standard_broker_name(space, address),))

    def _apply(
        self, source: Source, documents: list[dict[str, Any]], force: tuple[str, ...]
    ) -> None:
        path = source.runtime_file
        before = path.read_text(encoding="utf-8") if path.is_file() else None
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_dump(documents), encoding="utf-8")
        try:
            apply_stack(self.stack_file, self.target(), force=force, echo=log.info)
        except Exception as exc:
            if before is None:
                path.unlink()
            else:
                path.write_text(before, encoding="utf-8")
            log.exception("apply failed; the runtime part is back as it was")
            raise ChangeError(f"apply failed, nothing kept: {exc}") from exc
