"""A stored address with '/' in its name is refused at compile time, naming it: RabbitMQ's
AMQP 1.0 addresses split on '/', so the broker would refuse its autoLink at attach time
and end the router's session with every other autoLink on it."""

from __future__ import annotations

from pathlib import Path

import pytest

from enmesh.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXTRA = """
---
apiVersion: enmesh.io/v1
kind: Address
metadata: {name: iot.fleet-log}
spec: {addressSpace: iot, address: fleet/log, type: queue, plan: standard-queue}
---
apiVersion: enmesh.io/v1
kind: Address
metadata: {name: iot.fleet-position}
spec: {addressSpace: iot, address: fleet/position, type: multicast, plan: standard-multicast}
"""


def test_a_queue_with_a_slash_is_refused_and_a_multicast_address_is_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "iot.model.yml").write_text((ROOT / "stacks" / "iot.model.yml").read_text() + EXTRA)
    (tmp_path / "local.stack.yml").write_text((ROOT / "stacks" / "local.stack.yml").read_text())
    out = tmp_path / "out"
    assert main(["render", "--stack", str(tmp_path / "local.stack.yml"), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "stored addresses cannot contain '/'" in err
    assert "iot/fleet/log (queue)" in err and "fleet/position" not in err
    assert not out.exists()  # nothing written
