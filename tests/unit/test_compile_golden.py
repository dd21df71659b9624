"""Golden tests: every compiled artefact of both stacks, byte for byte.

After an intended change, regenerate with `ENMESH_UPDATE_GOLDENS=1 pytest tests/unit`
and review the diff: it is exactly what a deployment would change.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from enmesh.compile import compile_stack_file

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
STACKS = {
    "local": ROOT / "stacks" / "local.stack.yml",
    "multi": ROOT / "tests" / "fixtures" / "multi.stack.yml",
}


def _goldens(stack: str) -> dict[str, str]:
    base = GOLDEN / stack
    return {
        str(p.relative_to(base)): p.read_text(encoding="utf-8")
        for p in sorted(base.rglob("*"))
        if p.is_file()
    }


@pytest.mark.parametrize("stack", sorted(STACKS))
def test_artefacts_match_goldens(stack: str) -> None:
    _, artefacts = compile_stack_file(STACKS[stack])
    if os.environ.get("ENMESH_UPDATE_GOLDENS"):
        for rel, text in artefacts.files.items():
            target = GOLDEN / stack / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
    expected = _goldens(stack)
    assert sorted(artefacts.files) == sorted(expected), "set of artefacts changed"
    for rel, text in artefacts.files.items():
        assert text == expected[rel], f"{stack}/{rel} differs from its golden"


def test_every_artefact_kind_is_pinned() -> None:
    pinned = set(_goldens("local")) | set(_goldens("multi"))
    prefixes = {
        "routers/",
        "brokers/",
        "auth/policies/",
        "auth/users.json",
        "auth/sasl2/qdrouterd.conf",
    }
    assert all(any(p.startswith(prefix) for p in pinned) for prefix in prefixes)
