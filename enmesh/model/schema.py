"""Per-document validation: pydantic errors turned into located, readable problems."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from enmesh.model import kinds
from enmesh.model.kinds import API_VERSION, KINDS, Document
from enmesh.model.problems import Problem
from enmesh.model.source import FieldPath, SourceDocument

# Plain words for the name patterns in enmesh.model.kinds.
PATTERN_MEANINGS = {
    kinds.OBJECT_NAME: (
        "a lowercase name of a-z, 0-9, '-' and '.', starting and ending with a letter or digit"
    ),
    kinds.SPACE_NAME: "a lowercase DNS label of a-z, 0-9 and '-' (it becomes a vhost name)",
    kinds.AMQP_ADDRESS: "an AMQP address of letters, digits, '_', '.', '-' and '/'",
    kinds.ADDRESS_PATTERN: "an address, or an address prefix ending in '*'",
}

# A literal password is refused by name: it would end up in git.
_LITERAL_PASSWORD_HINT = (
    "a literal password is not allowed; reference a secret instead: "
    "passwordSecret: {name: <secret>, key: <key>}"
)


def _allowed_fields(model: type[BaseModel], path: FieldPath) -> list[str]:
    """Field names a model accepts at `path` (used to say what was expected)."""
    current: Any = model
    for part in path:
        if isinstance(part, int):
            continue
        field = current.model_fields.get(part) if hasattr(current, "model_fields") else None
        if field is None:
            return []
        current = _model_in(field.annotation)
        if current is None:
            return []
    return sorted(current.model_fields) if hasattr(current, "model_fields") else []


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The BaseModel inside an annotation such as `X`, `list[X]` or `X | None`."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _message(error: dict[str, Any], model: type[BaseModel], path: FieldPath) -> str:
    kind = error["type"]
    got = error.get("input")
    if kind == "extra_forbidden":
        if path and path[-1] == "password":
            return _LITERAL_PASSWORD_HINT
        allowed = _allowed_fields(model, path[:-1])
        return "unknown field" + (f"; expected one of: {', '.join(allowed)}" if allowed else "")
    if kind == "missing":
        return "required field is missing"
    text: str = error["msg"]
    text = text.removeprefix("Value error, ")
    if kind in {"literal_error", "enum"}:
        text = text.replace("Input should be", "expected")
    elif kind == "string_pattern_mismatch":
        pattern = error["ctx"]["pattern"]
        text = f"expected {PATTERN_MEANINGS.get(pattern, f'a string matching {pattern}')}"
    else:
        text = text.replace("Input should be", "expected a value that is").replace(
            "Input should have", "expected"
        )
    if got is not None and not isinstance(got, dict | list):
        text += f", got {got!r}"
    return text


def validate_document(doc: SourceDocument) -> tuple[Document | None, list[Problem]]:
    """Validate one document against its kind. Returns the typed document or its problems."""
    value = doc.value
    if not isinstance(value, dict):
        return None, [doc.problem((), "expected a mapping with apiVersion, kind, metadata, spec")]
    kind = value.get("kind")
    if kind not in KINDS:
        if kind is None:
            return None, [doc.problem(("kind",), "required field is missing")]
        return None, [
            doc.problem(
                ("kind",), f"unknown kind {kind!r}; expected one of: {', '.join(sorted(KINDS))}"
            )
        ]
    if value.get("apiVersion") not in (None, API_VERSION):
        return None, [
            doc.problem(
                ("apiVersion",), f"expected {API_VERSION!r}, got {value.get('apiVersion')!r}"
            )
        ]
    return validate_as(doc, KINDS[kind])


M = TypeVar("M", bound=BaseModel)


def validate_as(doc: SourceDocument, model: type[M]) -> tuple[M | None, list[Problem]]:
    """Validate a document against any strict pydantic model, locating every error."""
    try:
        return model.model_validate(doc.value), []
    except ValidationError as exc:
        problems = []
        errors = exc.errors()
        literal = {
            e["loc"][:-1]
            for e in errors
            if e["type"] == "extra_forbidden" and e["loc"][-1] == "password"
        }
        for error in errors:
            if error["type"] == "missing" and error["loc"][:-1] in literal:
                continue  # the literal-password message already says what to write
            path: FieldPath = tuple(error["loc"])
            problems.append(doc.problem(path, _message(dict(error), model, path)))
        return None, problems
