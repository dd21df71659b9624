"""The validated address model and the function that loads it from YAML files."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from enmesh.gcpause import paused_gc
from enmesh.model.checks import Documents, Located, check, warnings
from enmesh.model.kinds import (
    Address,
    AddressPlan,
    AddressSpace,
    AddressSpacePlan,
    AddressType,
    MessagingUser,
)
from enmesh.model.problems import ModelInvalidError, Problem
from enmesh.model.schema import validate_document
from enmesh.model.source import load_documents


@dataclass(frozen=True)
class Tenant:
    """One address space with its plan, addresses and users, each sorted for stable output."""

    space: AddressSpace
    plan: AddressSpacePlan
    addresses: tuple[Address, ...]
    users: tuple[MessagingUser, ...]

    @property
    def name(self) -> str:
        return self.space.name

    def of_type(self, *types: AddressType) -> tuple[Address, ...]:
        return tuple(a for a in self.addresses if a.spec.type in types)


@dataclass(frozen=True)
class Model:
    """A model that passed every check; the compiler trusts it."""

    tenants: tuple[Tenant, ...]  # sorted by name
    address_plans: dict[str, AddressPlan]
    warnings: tuple[Problem, ...] = ()  # allowed, but probably not meant

    def tenant(self, name: str) -> Tenant:
        for tenant in self.tenants:
            if tenant.name == name:
                return tenant
        raise KeyError(name)

    def partitions(self, address: Address) -> int:
        return self.address_plans[address.spec.plan].spec.partitions


def _collect(paths: Iterable[Path]) -> tuple[Documents, list[Problem]]:
    docs = Documents([], [], [], [], [])
    buckets: dict[str, list[Any]] = {
        "AddressSpacePlan": docs.space_plans,
        "AddressPlan": docs.address_plans,
        "AddressSpace": docs.spaces,
        "Address": docs.addresses,
        "MessagingUser": docs.users,
    }
    problems: list[Problem] = []
    for path in paths:
        sources, load_problems = load_documents(path)
        problems.extend(load_problems)
        for source in sources:
            typed, doc_problems = validate_document(source)
            problems.extend(doc_problems)
            if typed is not None:
                buckets[typed.kind].append(Located(typed, source))
    return docs, problems


def _assemble(docs: Documents) -> Model:
    space_plans = {item.doc.name: item.doc for item in docs.space_plans}
    addresses: dict[str, list[Address]] = defaultdict(list)
    for located_address in docs.addresses:
        addresses[located_address.doc.spec.addressSpace].append(located_address.doc)
    users: dict[str, list[MessagingUser]] = defaultdict(list)
    for located_user in docs.users:
        users[located_user.doc.spec.addressSpace].append(located_user.doc)
    tenants = tuple(
        Tenant(
            space=space,
            plan=space_plans[space.spec.plan],
            addresses=tuple(sorted(addresses[space.name], key=lambda a: a.spec.address)),
            users=tuple(sorted(users[space.name], key=lambda u: u.spec.username)),
        )
        for space in sorted((item.doc for item in docs.spaces), key=lambda s: s.name)
    )
    return Model(
        tenants,
        {item.doc.name: item.doc for item in docs.address_plans},
        tuple(warnings(docs)),
    )


def validate_files(paths: Iterable[Path]) -> list[Problem]:
    """Every problem in the model made of these files, sorted by file and line."""
    docs, problems = _collect(paths)
    return sorted(problems + check(docs))


def load_model(paths: Iterable[Path]) -> Model:
    """Load and validate a model; raises ModelInvalidError listing every problem."""
    with paused_gc():
        docs, problems = _collect(list(paths))
        problems += check(docs)
        if problems:
            raise ModelInvalidError(problems)
        return _assemble(docs)
