"""Check a compilation against the stack's engine: before, what the model needs; after,
every entity and vhost policy written.

`refuse_unserved` runs first and names, per missing feature, who needs it and which
engines have it. `config_problems` is the safety net behind it: the compiler must never
write a name the engine would reject at start-up.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from enmesh.compile.engines.features import Feature
from enmesh.compile.engines.profile import EngineProfile, engines_providing
from enmesh.compile.errors import CompileError
from enmesh.compile.layout import Layout
from enmesh.compile.qdrouterd import Entity
from enmesh.compile.stack import IdentityProvider
from enmesh.model import AddressType

# What each address type compiles to beyond a plain `address` (see router.py).
_ADDRESS_NEEDS = {
    AddressType.QUEUE: Feature.WAYPOINTS,
    AddressType.DEADLETTER: Feature.WAYPOINTS,
    AddressType.TOPIC: Feature.LINK_ROUTES,
    AddressType.SUBSCRIPTION: Feature.LINK_ROUTES,
}


def model_needs(layout: Layout) -> dict[Feature, list[str]]:
    """Feature -> who needs it (address spaces and addresses, in model order)."""
    needs: dict[Feature, list[str]] = {}
    for tenant in layout.standard_tenants:
        space = f"address space {tenant.name!r}"
        needs.setdefault(Feature.MULTI_TENANT, []).append(space)
        needs.setdefault(Feature.VHOST_POLICY, []).append(space)
        for address in tenant.addresses:
            feature = _ADDRESS_NEEDS.get(address.spec.type)
            if feature is not None:
                needs.setdefault(feature, []).append(
                    f"{address.spec.type} {tenant.name}/{address.spec.address}"
                )
    if layout.stack.spec.identity.provider is IdentityProvider.KEYCLOAK:
        needs[Feature.AUTH_SERVICE_PLUGIN] = ["spec.identity.provider keycloak"]
    return needs


def refuse_unserved(layout: Layout, profile: EngineProfile) -> None:
    """Raise CompileError naming every feature the model needs and the engine lacks."""
    lines = []
    for feature, needed_by in model_needs(layout).items():
        if profile.provides(feature):
            continue
        engines = engines_providing(feature)
        has = " and ".join(engines) or "no engine"
        lines.append(
            f"  - {feature.label}: needed by {', '.join(needed_by)} "
            f"({feature.value.why}); {profile.title} lacks it, "
            f"{has} {'have' if len(engines) > 1 else 'has'} it"
        )
    if lines:
        raise CompileError(
            f"stack {layout.stack.name!r}: engine {profile.title} cannot serve this model:\n"
            + "\n".join(lines)
            + "\n  set spec.routers.engine (stack file) or enmesh:routerEngine (Kubernetes) "
            "to an engine that has these features"
        )


def _as_config_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return " ".join(str(v) for v in value)
    return str(value)


def _attribute_problems(
    profile: EngineProfile, entity: str, attributes: Mapping[str, Any], where: str
) -> Iterator[str]:
    accepted = profile.entities.get(entity)
    if accepted is None:
        yield f"{where}: entity {entity!r} is not accepted by {profile.title}"
        return
    for name, value in attributes.items():
        if name not in accepted:
            yield f"{where}: {entity} attribute {name!r} is not accepted by {profile.title}"
        elif (only := accepted[name]) is not None and _as_config_text(value) != only:
            yield (
                f"{where}: {entity} {name}: {_as_config_text(value)!r}; "
                f"{profile.title} accepts only {only!r}"
            )


def config_problems(profile: EngineProfile, entities: Iterable[Entity], where: str) -> list[str]:
    """Every entity type, attribute name or value the engine would reject."""
    return [
        problem
        for entity in entities
        for problem in _attribute_problems(profile, entity.type, entity.attributes, where)
    ]


def policy_problems(profile: EngineProfile, policy: list[Any], where: str) -> list[str]:
    """A policyDir file: `[["vhost", {..., "groups": {name: settings}}]]`."""
    problems: list[str] = []
    for kind, settings in policy:
        vhost = {k: v for k, v in settings.items() if k != "groups"}
        if "groups" in settings:
            vhost["groups"] = "{...}"  # the name is checked here, the groups below
        problems += _attribute_problems(profile, kind, vhost, where)
        for group, values in settings.get("groups", {}).items():
            problems += _attribute_problems(
                profile, "vhostUserGroupSettings", values, f"{where} group {group!r}"
            )
    return problems


def require_valid(problems: list[str], profile: EngineProfile) -> None:
    if problems:
        raise CompileError(
            f"internal error: the compiler wrote config {profile.title} would reject "
            "(please report this):\n" + "\n".join(f"  - {p}" for p in problems)
        )
