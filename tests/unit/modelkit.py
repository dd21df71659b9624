"""Helpers to write small models and find the problems reported for them."""

from __future__ import annotations

from pathlib import Path

from enmesh.model import Problem, validate_files

BASE = """\
apiVersion: enmesh.io/v1
kind: AddressPlan
metadata: {name: plan-anycast}
spec: {addressType: anycast}
---
apiVersion: enmesh.io/v1
kind: AddressPlan
metadata: {name: plan-queue}
spec: {addressType: queue}
---
apiVersion: enmesh.io/v1
kind: AddressPlan
metadata: {name: plan-queue-2}
spec: {addressType: queue, partitions: 2}
---
apiVersion: enmesh.io/v1
kind: AddressPlan
metadata: {name: plan-topic}
spec: {addressType: topic}
---
apiVersion: enmesh.io/v1
kind: AddressPlan
metadata: {name: plan-sub}
spec: {addressType: subscription}
---
apiVersion: enmesh.io/v1
kind: AddressPlan
metadata: {name: plan-dlq}
spec: {addressType: deadletter}
---
apiVersion: enmesh.io/v1
kind: AddressSpacePlan
metadata: {name: small}
spec:
  addressSpaceType: standard
  resourceLimits: {connections: 10, addresses: 4, brokers: 1}
  addressPlans: [plan-anycast, plan-queue, plan-queue-2, plan-topic, plan-sub, plan-dlq]
---
apiVersion: enmesh.io/v1
kind: AddressSpace
metadata: {name: t1}
spec: {type: standard, plan: small}
"""
BASE_DOCUMENTS = BASE.count("---") + 1


def write_model(tmp_path: Path, extra: str, name: str = "model.yml") -> tuple[Path, str]:
    text = BASE + ("---\n" + extra if extra else "")
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path, text


def line_of(text: str, needle: str, occurrence: int = 1) -> int:
    """1-based line of the n-th line containing `needle`."""
    hits = [i + 1 for i, line in enumerate(text.splitlines()) if needle in line]
    return hits[occurrence - 1]


def problems(tmp_path: Path, extra: str) -> tuple[list[Problem], str, Path]:
    path, text = write_model(tmp_path, extra)
    return validate_files([path]), text, path


def only(found: list[Problem]) -> Problem:
    assert len(found) == 1, "\n".join(map(str, found))
    return found[0]
