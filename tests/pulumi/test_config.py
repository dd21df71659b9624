"""The stack config: Pulumi.yaml documents exactly the keys the program accepts."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from enmesh.k8s.config import (
    KubeStackConfig,
    StackConfigError,
    as_pulumi_config,
    parse_config,
    read_stack_file,
)
from tests.pulumi.conftest import ROOT


def test_pulumi_yaml_declares_every_key_with_the_programs_default() -> None:
    project = yaml.safe_load((ROOT / "Pulumi.yaml").read_text(encoding="utf-8"))
    declared = {key.removeprefix("enmesh:"): spec for key, spec in project["config"].items()}
    assert set(declared) == set(KubeStackConfig.model_fields)
    for key, spec in declared.items():
        assert spec.get("description"), key
        field = KubeStackConfig.model_fields[key]
        if "default" in spec:
            expected = field.default_factory() if field.default_factory else field.default
            assert spec["default"] == expected, key
        else:
            assert field.is_required() or field.default is None, key


def test_values_arrive_as_pulumi_passes_them() -> None:
    config = parse_config(
        as_pulumi_config({"enmesh:provider": "local", "enmesh:dnsNames": ["a.example"]}), "x"
    )
    assert config.dnsNames == ["a.example"]
    assert parse_config({"enmesh:provider": "local", "aws:region": "x"}, "x").region is None


def test_an_encrypted_value_is_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / "stacks").mkdir()
    (tmp_path / "Pulumi.yaml").write_text("name: x\nruntime: python\n")
    (tmp_path / "stacks" / "Pulumi.s.yaml").write_text(
        "config:\n  enmesh:provider: local\n  enmesh:routerImage:\n    secure: AAABAE=\n"
    )
    with pytest.raises(StackConfigError, match="enmesh:routerImage is an encrypted secret"):
        read_stack_file(tmp_path, "s")
