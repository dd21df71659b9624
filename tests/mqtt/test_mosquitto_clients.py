"""Debian's mosquitto_pub / mosquitto_sub (a second, independent MQTT implementation)
through the gateway: MQTT 5 over TLS with the stack's CA, MQTT 3.1.1 over TCP."""

from __future__ import annotations

import subprocess

import pytest

from tests.mqtt.conftest import GatewayProcess

pytestmark = pytest.mark.slow


def _login(gateway: GatewayProcess, identity: str) -> list[str]:
    return ["-h", "127.0.0.1", "-u", identity, "-P", gateway.mesh.passwords[identity]]


@pytest.mark.parametrize("qos", ["1", "2"])
def test_mosquitto_sub_over_tls_receives_what_mosquitto_pub_sends(
    gateway: GatewayProcess, qos: str
) -> None:
    tls = ["-p", str(gateway.ports["mqtts"]), "--cafile", str(gateway.mesh.ca)]
    subscriber = subprocess.Popen(
        ["mosquitto_sub", *_login(gateway, "device@iot"), *tls, "-V", "mqttv5", "-i", "cli-sub",
         "-t", "broadcast", "-q", qos, "-C", "1", "-W", "30"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        # QoS 1 or 2 to a multicast address: the mesh gives credit once the subscriber is
        # attached, so mosquitto_pub's PUBACK or PUBCOMP (its exit) follows the delivery.
        published = subprocess.run(
            ["mosquitto_pub", *_login(gateway, "backend@iot"), "-p", str(gateway.port),
             "-V", "mqttv311", "-i", "cli-pub", "-t", "broadcast", "-q", qos, "-m", "from cli"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )  # fmt: skip
        assert published.returncode == 0, published.stderr
        out, err = subscriber.communicate(timeout=30)
    finally:
        subscriber.kill()
    assert subscriber.returncode == 0, err
    assert out.strip() == "from cli"


def test_mosquitto_pub_with_a_wrong_password_is_told_so(gateway: GatewayProcess) -> None:
    result = subprocess.run(
        ["mosquitto_pub", "-h", "127.0.0.1", "-p", str(gateway.port), "-u", "device@iot",
         "-P", "wrong", "-V", "mqttv5", "-t", "telemetry", "-m", "x"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )  # fmt: skip
    assert result.returncode != 0
    assert "bad user name or password" in result.stderr.lower()
