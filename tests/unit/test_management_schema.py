"""Management's types against qdrouterd 1.19's: the same type names and bases, at least its
attributes, and only operations it offers too.

tests/unit/qdrouterd-1.19-management-names.json holds qdrouterd's names only (what its agent
answers to GET-TYPES, GET-ATTRIBUTES, GET-OPERATIONS), so no qdrouterd checkout is needed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from enmesh.router import management_schema
from enmesh.router.config_schema import ENTITY_TYPES

THEIRS = json.loads(
    (Path(__file__).parent / "qdrouterd-1.19-management-names.json").read_text(encoding="utf-8")
)["types"]
OURS = {t.name: t for t in management_schema.TYPES.values()}
TEST_ONLY = {"org.apache.qpid.dispatch.dummy"}  # qdrouterd's own test entity


def test_the_same_types() -> None:
    assert set(OURS) == set(THEIRS) - TEST_ONLY


@pytest.mark.parametrize("name", sorted(set(THEIRS) - TEST_ONLY))
def test_bases_attributes_operations(name: str) -> None:
    ours, theirs = OURS[name], THEIRS[name]
    assert [b.name for b in ours.bases()] == theirs["bases"]
    assert set(theirs["attributes"]) <= set(ours.attributes())
    assert set(ours.operations()) <= set(theirs["operations"])


def test_configuration_attributes_come_from_the_config_table() -> None:
    for entity in ENTITY_TYPES:
        attributes = OURS[entity.long_name].attributes()
        assert {a.name for a in entity.attributes} <= set(attributes), entity.name
