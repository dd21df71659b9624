"""Checks across documents: references, duplicates and plan limits.

Each check takes documents that already validated on their own, so it can trust
their fields, and reports problems at the field that holds the bad reference.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Generic, TypeVar

from enmesh.model.kinds import (
    Address,
    AddressPlan,
    AddressSpace,
    AddressSpacePlan,
    AddressType,
    Document,
    MessagingUser,
    SpaceType,
)
from enmesh.model.problems import Problem
from enmesh.model.source import SourceDocument
from enmesh.suggest import suggest

D = TypeVar("D", bound=Document)


@dataclass(frozen=True)
class Located(Generic[D]):
    """A validated document with the source it came from."""

    doc: D
    source: SourceDocument

    def problem(self, *path: str | int, message: str) -> Problem:
        return self.source.problem(path, message)


@dataclass(frozen=True)
class Documents:
    """The validated documents of a model, by kind, in file order."""

    space_plans: list[Located[AddressSpacePlan]]
    address_plans: list[Located[AddressPlan]]
    spaces: list[Located[AddressSpace]]
    addresses: list[Located[Address]]
    users: list[Located[MessagingUser]]

    # Name indexes shared by the checks (the first definition wins; duplicates are a
    # problem of their own). Built once, after every document has been collected.
    @cached_property
    def spaces_by_name(self) -> dict[str, Located[AddressSpace]]:
        return _first_by_name(self.spaces)

    @cached_property
    def space_plans_by_name(self) -> dict[str, Located[AddressSpacePlan]]:
        return _first_by_name(self.space_plans)

    @cached_property
    def address_plans_by_name(self) -> dict[str, Located[AddressPlan]]:
        return _first_by_name(self.address_plans)


def _first_by_name(items: list[Located[D]]) -> dict[str, Located[D]]:
    found: dict[str, Located[D]] = {}
    for item in items:
        found.setdefault(item.doc.name, item)
    return found


def _unknown(kind: str, name: str, known: Iterable[str]) -> str:
    return (
        f"unknown {kind} {name!r}; expected one of: {', '.join(sorted(known)) or '(none defined)'}"
    )


def _wrong_type(space: str, name: str, wanted: AddressType, found: Located[Address] | None) -> str:
    actual = "does not exist" if found is None else f"is a {found.doc.spec.type}"
    return f"expected a {wanted} address in space {space!r}; {name!r} {actual}"


def _where(item: Located[D], *path: str | int) -> str:
    return f"{item.source.file}:{item.source.line_of(path)}"


def duplicate_names(docs: Documents) -> Iterator[Problem]:
    for group in (docs.space_plans, docs.address_plans, docs.spaces, docs.addresses, docs.users):
        first: dict[str, Located[Document]] = {}
        for item in group:
            earlier = first.setdefault(item.doc.name, item)  # type: ignore[arg-type]
            if earlier is not item:
                yield item.problem(
                    "metadata",
                    "name",
                    message=(
                        f"duplicate {item.doc.kind} name {item.doc.name!r}; first defined at "
                        f"{_where(earlier, 'metadata', 'name')}"
                    ),
                )


def plan_references(docs: Documents) -> Iterator[Problem]:
    address_plans = docs.address_plans_by_name
    space_plans = docs.space_plans_by_name
    for plan in docs.space_plans:
        for i, name in enumerate(plan.doc.spec.addressPlans):
            if name not in address_plans:
                yield plan.problem(
                    "spec",
                    "addressPlans",
                    i,
                    message=_unknown("AddressPlan", name, address_plans),
                )
    for space in docs.spaces:
        plan_name = space.doc.spec.plan
        found = space_plans.get(plan_name)
        if found is None:
            yield space.problem(
                "spec",
                "plan",
                message=_unknown("AddressSpacePlan", plan_name, space_plans),
            )
        elif found.doc.spec.addressSpaceType != space.doc.spec.type:
            yield space.problem(
                "spec",
                "plan",
                message=(
                    f"plan {plan_name!r} is for {found.doc.spec.addressSpaceType} address spaces, "
                    f"but this space is {space.doc.spec.type}"
                ),
            )


def address_references(docs: Documents) -> Iterator[Problem]:
    spaces = docs.spaces_by_name
    space_plans = docs.space_plans_by_name
    address_plans = docs.address_plans_by_name
    for item in docs.addresses:
        spec = item.doc.spec
        space = spaces.get(spec.addressSpace)
        if space is None:
            yield item.problem(
                "spec",
                "addressSpace",
                message=_unknown("AddressSpace", spec.addressSpace, spaces),
            )
            continue
        for setting in spec.misplaced_settings():
            yield item.problem("spec", setting, message=f"does not apply to {spec.type} addresses")
        if spec.type is AddressType.SUBSCRIPTION and spec.topic is None:
            yield item.problem("spec", "topic", message="required for subscription addresses")
        if space.doc.spec.type is SpaceType.BROKERED and spec.type.is_direct:
            yield item.problem(
                "spec",
                "type",
                message=(
                    f"{spec.type} needs the router mesh; address space {spec.addressSpace!r} is "
                    "brokered (expected queue, topic, subscription or deadletter)"
                ),
            )
        plan = address_plans.get(spec.plan)
        if plan is None:
            yield item.problem(
                "spec",
                "plan",
                message=_unknown("AddressPlan", spec.plan, address_plans),
            )
            continue
        if plan.doc.spec.addressType != spec.type:
            yield item.problem(
                "spec",
                "plan",
                message=(
                    f"plan {spec.plan!r} is for {plan.doc.spec.addressType} addresses, "
                    f"not {spec.type}"
                ),
            )
        space_plan = space_plans.get(space.doc.spec.plan)
        if space_plan is not None and spec.plan not in space_plan.doc.spec.addressPlans:
            yield item.problem(
                "spec",
                "plan",
                message=(
                    f"plan {spec.plan!r} is not offered by address space plan "
                    f"{space_plan.doc.name!r} (offers: "
                    f"{', '.join(sorted(space_plan.doc.spec.addressPlans))})"
                ),
            )


def addresses_within_spaces(docs: Documents) -> Iterator[Problem]:
    """Duplicate addresses, subscription topics and dead-letter targets, per space."""
    by_space: dict[tuple[str, str], Located[Address]] = {}
    for item in docs.addresses:
        key = (item.doc.spec.addressSpace, item.doc.spec.address)
        earlier = by_space.setdefault(key, item)
        if earlier is not item:
            yield item.problem(
                "spec",
                "address",
                message=(
                    f"duplicate address {key[1]!r} in address space {key[0]!r}; first defined at "
                    f"{_where(earlier, 'spec', 'address')}"
                ),
            )
    for item in docs.addresses:
        spec = item.doc.spec
        if spec.topic is not None:
            topic = by_space.get((spec.addressSpace, spec.topic))
            if topic is None or topic.doc.spec.type is not AddressType.TOPIC:
                message = _wrong_type(spec.addressSpace, spec.topic, AddressType.TOPIC, topic)
                yield item.problem("spec", "topic", message=message)
        if spec.deadLetterAddress is not None:
            target = by_space.get((spec.addressSpace, spec.deadLetterAddress))
            if target is None or target.doc.spec.type is not AddressType.DEADLETTER:
                message = _wrong_type(
                    spec.addressSpace, spec.deadLetterAddress, AddressType.DEADLETTER, target
                )
                yield item.problem("spec", "deadLetterAddress", message=message)


def plan_limits(docs: Documents) -> Iterator[Problem]:
    spaces = docs.spaces_by_name
    space_plans = docs.space_plans_by_name
    address_plans = docs.address_plans_by_name
    counts = Counter(item.doc.spec.addressSpace for item in docs.addresses)
    for name, space in spaces.items():
        plan = space_plans.get(space.doc.spec.plan)
        if plan is None:
            continue
        limits = plan.doc.spec.resourceLimits
        if counts[name] > limits.addresses:
            yield space.problem(
                "spec",
                "plan",
                message=(
                    f"address space has {counts[name]} addresses but plan {plan.doc.name!r} allows "
                    f"at most {limits.addresses} (resourceLimits.addresses)"
                ),
            )
    for item in docs.addresses:
        owner = spaces.get(item.doc.spec.addressSpace)
        address_plan = address_plans.get(item.doc.spec.plan)
        plan = space_plans.get(owner.doc.spec.plan) if owner else None
        if plan is None or address_plan is None:
            continue
        partitions = address_plan.doc.spec.partitions
        if partitions > plan.doc.spec.resourceLimits.brokers:
            yield item.problem(
                "spec",
                "plan",
                message=(
                    f"plan {address_plan.doc.name!r} spreads the address over {partitions} brokers "
                    f"but space plan {plan.doc.name!r} allows at most "
                    f"{plan.doc.spec.resourceLimits.brokers} (resourceLimits.brokers)"
                ),
            )


def user_references(docs: Documents) -> Iterator[Problem]:
    spaces = docs.spaces_by_name
    seen: dict[tuple[str, str], Located[MessagingUser]] = {}
    for item in docs.users:
        spec = item.doc.spec
        if spec.addressSpace not in spaces:
            yield item.problem(
                "spec",
                "addressSpace",
                message=_unknown("AddressSpace", spec.addressSpace, spaces),
            )
        key = (spec.addressSpace, spec.username)
        earlier = seen.setdefault(key, item)
        if earlier is not item:
            yield item.problem(
                "spec",
                "username",
                message=(
                    f"duplicate username {spec.username!r} in address space {spec.addressSpace!r}; "
                    f"first defined at {_where(earlier, 'spec', 'username')}"
                ),
            )


def _names_by_space(docs: Documents) -> dict[str, set[str]]:
    """What a client may name in each space: its addresses and `topic::subscription`."""
    names: dict[str, set[str]] = {}
    for item in docs.addresses:
        spec = item.doc.spec
        names.setdefault(spec.addressSpace, set()).add(spec.address)
        if spec.type is AddressType.SUBSCRIPTION and spec.topic is not None:
            names[spec.addressSpace].add(f"{spec.topic}::{spec.address}")
    return names


def _unknown_pattern(pattern: str, space: str, known: set[str]) -> str:
    hint = suggest(pattern, known) or f" (it has: {', '.join(sorted(known)) or 'no addresses'})"
    return f"no address {pattern!r} in address space {space!r}{hint}"


def _authorization_patterns(
    docs: Documents,
) -> Iterator[tuple[Located[MessagingUser], tuple[str | int, ...], str, set[str]]]:
    names = _names_by_space(docs)
    for item in docs.users:
        spec = item.doc.spec
        if spec.addressSpace not in docs.spaces_by_name:
            continue  # reported by user_references
        for i, rule in enumerate(spec.authorization):
            for j, pattern in enumerate(rule.addresses):
                path = ("spec", "authorization", i, "addresses", j)
                yield item, path, pattern, names.get(spec.addressSpace, set())


def user_authorizations(docs: Documents) -> Iterator[Problem]:
    """A plain name a user is authorized for must exist: a typo there would lock the
    user out of the address they meant, and only at run time."""
    for item, path, pattern, known in _authorization_patterns(docs):
        if not pattern.endswith("*") and pattern not in known:
            message = _unknown_pattern(pattern, item.doc.spec.addressSpace, known)
            yield item.problem(*path, message=message)


def prefix_authorizations(docs: Documents) -> Iterator[Problem]:
    """Warnings: a `prefix*` pattern that matches no address yet (maybe on purpose)."""
    for item, path, pattern, known in _authorization_patterns(docs):
        prefix = pattern.removesuffix("*")
        if pattern.endswith("*") and not any(name.startswith(prefix) for name in known):
            space = item.doc.spec.addressSpace
            yield item.problem(
                *path, message=f"pattern {pattern!r} matches no address in space {space!r} yet"
            )


ALL_CHECKS = (
    duplicate_names,
    plan_references,
    address_references,
    addresses_within_spaces,
    plan_limits,
    user_references,
    user_authorizations,
)
WARNING_CHECKS = (prefix_authorizations,)


def check(docs: Documents) -> list[Problem]:
    return [problem for run in ALL_CHECKS for problem in run(docs)]


def warnings(docs: Documents) -> list[Problem]:
    """What is allowed but probably not meant; `enmesh validate` prints these."""
    return sorted(problem for run in WARNING_CHECKS for problem in run(docs))
