"""Engine profiles: the config entities and attributes each router engine accepts.

- enmesh-router: derived from the router's own table (`enmesh.router.config_schema`):
  implemented and ignored names are accepted, refused ones are not; a `default only`
  attribute is accepted with qdrouterd's default value only.
- qdrouterd 1.19 and skupper-router 3.x: the names from each engine's management schema,
  committed next to this module with the version, commit and file they came from.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from pathlib import Path

from enmesh.compile.engines.features import Feature
from enmesh.router.config_schema import SCHEMA, Disposition

HERE = Path(__file__).resolve().parent


class Engine(StrEnum):
    ENMESH_ROUTER = "enmesh-router"
    QDROUTERD = "qdrouterd"  # Qpid Dispatch Router 1.19
    SKUPPER_ROUTER = "skupper-router"  # 3.x


# attribute name -> None (any value) or the only value accepted, as a config file writes it
Attributes = Mapping[str, str | None]


@dataclass(frozen=True)
class EngineProfile:
    engine: Engine
    title: str  # engine and version, for messages
    source: str  # where the names came from
    entities: Mapping[str, Attributes]

    def accepts(self, entity: str, attribute: str | None = None) -> bool:
        names = self.entities.get(entity)
        return names is not None and (attribute is None or attribute in names)

    def provides(self, feature: Feature) -> bool:
        return all(self.accepts(entity, attribute) for entity, attribute in feature.value.names)

    @property
    def features(self) -> frozenset[Feature]:
        return frozenset(f for f in Feature if self.provides(f))


def _from_names_file(engine: Engine, title: str, file: str) -> EngineProfile:
    document = json.loads((HERE / file).read_text(encoding="utf-8"))
    entities = {entity: dict.fromkeys(names) for entity, names in document["entities"].items()}
    return EngineProfile(engine, title, f"{file}: {document['source']}", entities)


def _enmesh_router() -> EngineProfile:
    entities: dict[str, Attributes] = {}
    for entity in SCHEMA.values():
        if entity.build is None and entity.in_config_file:
            continue  # the whole entity is refused (authServicePlugin, exchange, ...)
        attributes: dict[str, str | None] = {}
        for attribute in entity.attributes:
            if attribute.disposition is Disposition.REFUSED:
                continue
            only = attribute.default if attribute.disposition is Disposition.DEFAULT_ONLY else None
            for name in (attribute.name, *attribute.aliases):
                attributes[name] = only
        entities[entity.name] = attributes
    return EngineProfile(
        Engine.ENMESH_ROUTER,
        "enmesh-router",
        "enmesh/router/config_schema.py: the router's own table (implemented and ignored "
        "names; `default only` ones with their default value)",
        entities,
    )


@cache
def profile_of(engine: Engine) -> EngineProfile:
    if engine is Engine.ENMESH_ROUTER:
        return _enmesh_router()
    if engine is Engine.QDROUTERD:
        return _from_names_file(engine, "qdrouterd 1.19", "qdrouterd-1.19-config-names.json")
    return _from_names_file(
        engine, "skupper-router 3.4.1", "skupper-router-3.4.1-config-names.json"
    )


def engines_providing(feature: Feature) -> list[str]:
    return [profile_of(e).title for e in Engine if profile_of(e).provides(feature)]
