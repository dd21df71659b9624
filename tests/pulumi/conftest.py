"""Run the Pulumi program once per stack under the mock runtime and share the captures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from enmesh.k8s.capture import Capture, run_program
from enmesh.k8s.config import read_stack_file

ROOT = Path(__file__).resolve().parents[2]
STACKS = ("local", "baremetal", "aws", "azure", "gcp")
CLOUDS = ("aws", "azure", "gcp")

_captures: dict[str, Capture] = {}


def capture_of(stack: str) -> Capture:
    if stack not in _captures:
        _captures[stack] = run_program(ROOT, stack)
    return _captures[stack]


def config_with(stack: str, **overrides: object) -> dict[str, Any]:
    """The stack's own config with some `enmesh:` keys replaced (None removes a key)."""
    values = read_stack_file(ROOT, stack)
    for key, value in overrides.items():
        values.pop(f"enmesh:{key}", None)
        if value is not None:
            values[f"enmesh:{key}"] = value
    return values


def run_with(stack: str, **overrides: object) -> Capture:
    return run_program(ROOT, stack, config_with(stack, **overrides))


@pytest.fixture(params=STACKS)
def stack(request: pytest.FixtureRequest) -> str:
    return str(request.param)
