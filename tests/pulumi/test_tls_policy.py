"""`enmesh:tlsMinVersion` reaches the Kubernetes objects: router and broker configs."""

from __future__ import annotations

import re
from typing import Any

import pulumi
import pytest

from enmesh.k8s.capture import Capture, run_program
from tests.pulumi.conftest import ROOT, capture_of, config_with, run_with


def _config_files(capture: Capture, stack: str) -> dict[str, str]:
    """Every compiled file the router and broker pods mount, by Secret key."""
    files: dict[str, str] = {}
    for secret in capture.kind("Secret"):
        data: dict[str, Any] = secret.get("stringData") or {}
        files |= {k: v for k, v in data.items() if k.endswith((".conf", ".rabbitmq.conf"))}
    assert any(k.startswith(f"routers_{stack}-router-") for k in files)
    return files


def _versions(files: dict[str, str]) -> tuple[set[str], set[tuple[str, ...]]]:
    """(router sslProfile `protocols` values, RabbitMQ `ssl_options.versions` lists)."""
    routers = {p for k, v in files.items() if k.startswith("routers_") for p in
               re.findall(r"protocols: (.+)", v)}  # fmt: skip
    brokers = {
        tuple(re.findall(r"^ssl_options\.versions\.\d+ = (\S+)$", v, re.M))
        for k, v in files.items()
        if k.endswith(".rabbitmq.conf")
    }
    return routers, brokers


def test_default_stacks_offer_tls_1_2_and_1_3() -> None:
    assert _versions(_config_files(capture_of("aws"), "aws")) == (
        {"TLSv1.2 TLSv1.3"},
        {("tlsv1.3", "tlsv1.2")},
    )


def test_tls_min_version_1_3_reaches_routers_and_brokers() -> None:
    capture = run_with("local", tlsMinVersion="1.3")
    assert _versions(_config_files(capture, "local")) == ({"TLSv1.3"}, {("tlsv1.3",)})


def test_an_older_tls_version_is_refused_naming_the_key() -> None:
    capture = Capture()
    with pytest.raises(pulumi.RunError) as error:
        run_program(ROOT, "local", config_with("local", tlsMinVersion="1.1"), capture=capture)
    assert "enmesh:tlsMinVersion: Input should be '1.2' or '1.3'" in str(error.value)
    assert capture.resources == []
