"""The routers' broker user as a password hash in the definitions a RabbitMQ pod loads at boot:
checked against a real RabbitMQ, which must accept the password and refuse another."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from enmesh.k8s.rabbitmq_hash import password_hash, with_user
from tests.support import fixtures as support_fixtures
from tests.support.rabbitmq import RabbitMQBroker

rabbitmq_broker = support_fixtures.rabbitmq_broker
rendered_local_stack = support_fixtures.rendered_local_stack


def test_hash_layout_is_salt_then_sha256() -> None:
    import base64  # noqa: PLC0415
    import hashlib  # noqa: PLC0415

    salt = bytes.fromhex("908dc60a")
    raw = base64.b64decode(password_hash("test12", salt))
    assert raw[:4] == salt
    assert raw[4:] == hashlib.sha256(salt + b"test12").digest()
    with pytest.raises(ValueError, match="4 bytes"):
        password_hash("x", b"abc")


def test_with_user_adds_only_a_hash(rendered_local_stack: Path) -> None:
    compiled = (rendered_local_stack / "brokers" / "broker-0.definitions.json").read_text()
    result = json.loads(with_user(compiled, "enmesh-router", "s3cret-value", os.urandom(4)))
    assert [u["name"] for u in result["users"]] == ["enmesh-router"]
    assert "s3cret-value" not in json.dumps(result)
    assert result["queues"] == json.loads(compiled)["queues"]


@pytest.mark.slow
def test_rabbitmq_accepts_the_hashed_password(
    rabbitmq_broker: RabbitMQBroker, tmp_path: Path
) -> None:
    user, password = "enmesh-k8s-hash-check", os.urandom(12).hex()
    definitions = tmp_path / "definitions.json"
    definitions.write_text(
        with_user(json.dumps({"users": []}), user, password, os.urandom(4)), encoding="utf-8"
    )
    rabbitmq_broker.ctl("import_definitions", str(definitions))
    try:
        ok = rabbitmq_broker.ctl("authenticate_user", user, password, check=False)
        assert ok.returncode == 0, ok.stderr
        wrong = rabbitmq_broker.ctl("authenticate_user", user, password + "x", check=False)
        assert wrong.returncode != 0
    finally:
        rabbitmq_broker.ctl("delete_user", user)
