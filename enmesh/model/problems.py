"""Problems found in a model, each pinned to file, document, field and line."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Problem:
    """One thing wrong with a model, located precisely enough to fix it without searching."""

    file: str
    line: int
    document: int  # 1-based position of the YAML document in its file
    document_name: str  # "Kind/name", or "" when the document has neither
    field: str  # dotted path with [index] for list items; "" for the whole document
    message: str

    def __str__(self) -> str:
        where = f"document {self.document}"
        if self.document_name:
            where += f" ({self.document_name})"
        field = f"{self.field}: " if self.field else ""
        return f"{self.file}:{self.line}: {where}: {field}{self.message}"


class ModelInvalidError(Exception):
    """Raised with every problem in the model; nothing is compiled from an invalid model."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = sorted(problems)
        count = len(self.problems)
        summary = f"{count} problem{'s' if count != 1 else ''} in the model"
        super().__init__("\n".join([summary, *(f"  {p}" for p in self.problems)]))
