"""The stack's `tls` policy: validated, compiled into router and RabbitMQ configs, and read
back by enmesh-router (its sslProfile `protocols` / `ciphers`)."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from enmesh.compile import compile_model, load_stack
from enmesh.model import ModelInvalidError, load_model
from enmesh.router.config import RouterConfigError, load_router_config

ROOT = Path(__file__).resolve().parents[2]
LOCAL_STACK = ROOT / "stacks" / "local.stack.yml"


def stack_with(tmp_path: Path, tls: str) -> Path:
    """The local stack with a `tls:` block added to its spec, next to a copy of its model."""
    text = LOCAL_STACK.read_text(encoding="utf-8")
    (tmp_path / "iot.model.yml").write_text((ROOT / "stacks" / "iot.model.yml").read_text())
    path = tmp_path / "local.stack.yml"
    path.write_text(text + textwrap.indent(tls, "  "), encoding="utf-8")
    return path


def compiled(path: Path) -> dict[str, str]:
    stack, models = load_stack(path)
    return compile_model(stack, load_model(models)).files


def test_default_policy_is_tls_1_2_and_up_without_cbc_sha1() -> None:
    stack, models = load_stack(LOCAL_STACK)
    files = compile_model(stack, load_model(models)).files
    router = files["routers/local-router-0.conf"]
    assert router.count("protocols: TLSv1.2 TLSv1.3") == 3  # client, inter-router, broker
    ciphers = re.findall(r"ciphers: (\S+)", router)
    assert len(ciphers) == 3
    suites = ciphers[0].split(":")
    assert all("GCM" in s or "CHACHA20" in s for s in suites) and not any(
        "CBC" in s for s in suites
    )
    broker = files["brokers/broker-0.rabbitmq.conf"]
    versions = re.findall(r"^ssl_options\.versions\.\d+ = (\S+)$", broker, re.M)
    assert versions == ["tlsv1.3", "tlsv1.2"]
    broker_suites = re.findall(r"^ssl_options\.ciphers\.\d+ = (\S+)$", broker, re.M)
    assert broker_suites[:3] == ["TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256",
                                 "TLS_AES_128_GCM_SHA256"]  # fmt: skip
    assert broker_suites[3:] == suites


def test_min_version_1_3_reaches_every_component(tmp_path: Path) -> None:
    files = compiled(stack_with(tmp_path, "tls: {minVersion: '1.3'}\n"))
    for name, text in files.items():
        if name.startswith("routers/"):
            assert set(re.findall(r"protocols: (.+)", text)) == {"TLSv1.3"}, name
        if name.endswith(".rabbitmq.conf"):
            assert re.findall(r"^ssl_options\.versions\.\d+ = (\S+)$", text, re.M) == ["tlsv1.3"]
            assert "ECDHE" not in text  # TLS 1.2 suites are not offered at all


def test_cipher_list_can_be_set(tmp_path: Path) -> None:
    files = compiled(stack_with(tmp_path, "tls: {ciphers: [ECDHE-ECDSA-AES256-GCM-SHA384]}\n"))
    assert "ciphers: ECDHE-ECDSA-AES256-GCM-SHA384\n" in files["routers/local-router-1.conf"]
    assert (
        "ssl_options.ciphers.4 = ECDHE-ECDSA-AES256-GCM-SHA384\n"
        in (files["brokers/broker-0.rabbitmq.conf"])
    )


@pytest.mark.parametrize(
    ("tls", "field"),
    [
        ("tls: {minVersion: '1.1'}\n", "spec.tls.minVersion"),
        ("tls: {minVersion: 1.2}\n", "spec.tls.minVersion"),  # a YAML number, not "1.2"
        ("tls: {ciphers: []}\n", "spec.tls.ciphers"),
        ("tls: {ciphers: ['AES256:!aNULL']}\n", "spec.tls.ciphers[0]"),
        ("tls: {minVerison: '1.3'}\n", "spec.tls.minVerison"),
    ],
)
def test_bad_tls_policy_is_refused_naming_the_field(tmp_path: Path, tls: str, field: str) -> None:
    with pytest.raises(ModelInvalidError) as raised:
        load_stack(stack_with(tmp_path, tls))
    assert [p.field for p in raised.value.problems] == [field]


ROUTER = "router {\n    id: r\n}\nsslProfile {\n    name: p\n"


@pytest.mark.parametrize(
    ("attribute", "phrase"),
    [
        ("protocols: TLSv1.2 TLSv1.4", "expected one or more of TLSv1, TLSv1.1, TLSv1.2, TLSv1.3"),
        ("protocols: SSLv3", "got 'SSLv3'"),
        ("ciphers: NO-SUCH-SUITE", "no cipher suite matches 'NO-SUCH-SUITE'"),
    ],
)
def test_router_refuses_bad_protocols_and_ciphers_at_load(
    tmp_path: Path, attribute: str, phrase: str
) -> None:
    path = tmp_path / "router.conf"
    path.write_text(ROUTER + f"    {attribute}\n}}\n", encoding="utf-8")
    with pytest.raises(RouterConfigError) as raised:
        load_router_config(path)
    assert str(raised.value).startswith(f"{path}:6: "), raised.value
    assert phrase in str(raised.value)


def test_router_reads_protocols_and_ciphers(tmp_path: Path) -> None:
    path = tmp_path / "router.conf"
    path.write_text(ROUTER + "    protocols: TLSv1.3\n    ciphers: ECDHE+AESGCM\n}\n")
    profile = load_router_config(path).ssl_profile("p")
    assert (profile.protocols, profile.ciphers) == ("TLSv1.3", "ECDHE+AESGCM")
