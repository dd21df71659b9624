"""Rendered router configs and vhost policies read back and checked, name by name, against
an engine's profile: independent of the compiler's own check (enmesh.compile.engines.check)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from enmesh.compile.engines import Engine, profile_of


def parse_conf(text: str) -> list[tuple[str, dict[str, str]]]:
    """A rendered qdrouterd.conf read back: (entity, {attribute: value})."""
    entities: list[tuple[str, dict[str, str]]] = []
    for line in text.splitlines():
        if opened := re.fullmatch(r"(\w+) \{", line):
            entities.append((opened.group(1), {}))
        elif item := re.fullmatch(r" {4}(\w+): (.*)", line):
            entities[-1][1][item.group(1)] = item.group(2)
    return entities


def _policy_entities(text: str) -> list[tuple[str, Mapping[str, Any]]]:
    document = json.loads(text)
    found: list[tuple[str, Mapping[str, Any]]] = [(kind, s) for kind, s in document]
    found += [
        ("vhostUserGroupSettings", group)
        for _, settings in document
        for group in settings["groups"].values()
    ]
    return found


def names_problems(engine: Engine, files: Mapping[str, str]) -> list[str]:
    """Every entity or attribute name in `routers/*.conf` and `auth/policies/*.json` that the
    engine does not accept; the files must hold some router config."""
    accepted = profile_of(engine).entities
    problems = []
    configs = 0
    for path, text in files.items():
        entities: list[tuple[str, Mapping[str, Any]]]
        if path.startswith("routers/") and path.endswith(".conf"):
            entities = list(parse_conf(text))
            configs += 1
        elif path.startswith("auth/policies/"):
            entities = _policy_entities(text)
        else:
            continue
        for kind, attributes in entities:
            if kind not in accepted:
                problems.append(f"{path}: entity {kind}")
            problems += [
                f"{path}: {kind}.{a}" for a in attributes if a not in accepted.get(kind, {})
            ]
    assert configs, f"no router config among {sorted(files)}"
    return problems
