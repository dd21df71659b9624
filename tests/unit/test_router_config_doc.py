"""docs/router-config.md is generated from the config table and must be current."""

from __future__ import annotations

from pathlib import Path

from enmesh.router import config_doc
from enmesh.router.config_schema import ENTITY_TYPES


def test_the_committed_reference_is_current() -> None:
    assert config_doc.main(["--check"]) == 0, "run: python -m enmesh.router.config_doc"


def test_check_fails_on_a_stale_file(tmp_path: Path) -> None:
    stale = tmp_path / "router-config.md"
    stale.write_text(config_doc.render().replace("`workerThreads`", "`threads`"))
    assert config_doc.main(["--check", "--output", str(stale)]) == 1


def test_every_entity_and_attribute_is_listed() -> None:
    text = config_doc.render()
    for entity in ENTITY_TYPES:
        section = text.split(f"## `{entity.name}`\n", 1)[1].split("\n## ", 1)[0]
        for attribute in entity.attributes:
            assert f"| `{attribute.name}`" in section, (entity.name, attribute.name)
            assert str(attribute.disposition) in section
