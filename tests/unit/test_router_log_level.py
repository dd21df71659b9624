"""A config's `log { module: DEFAULT enable: ... }` sets the router's Python log level."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from enmesh.router.config import load_router_config
from enmesh.router.log_level import OFF, configured_level


@pytest.mark.parametrize(
    ("enable", "level"),
    [
        ("debug+", logging.DEBUG),
        ("trace+", logging.DEBUG),
        ("notice+", logging.WARNING),
        ("error+", logging.ERROR),
        ("warning,info", logging.INFO),
        ("none", OFF),
    ],
)
def test_default_module_sets_the_level(tmp_path: Path, enable: str, level: int) -> None:
    conf = tmp_path / "r.conf"
    conf.write_text(
        f"router {{\n    id: r0\n}}\nlog {{\n    module: DEFAULT\n    enable: {enable}\n}}\n"
    )
    assert configured_level(load_router_config(conf)) == level


def test_no_default_log_entity_sets_nothing(tmp_path: Path) -> None:
    conf = tmp_path / "r.conf"
    conf.write_text("router {\n    id: r0\n}\n")
    assert configured_level(load_router_config(conf)) is None
