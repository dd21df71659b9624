"""A real mesh (2 enmesh-router processes and a RabbitMQ for the stored address types,
SASL users from the sample model plus a will account) and the MQTT gateway as a real
process in front of router 0; paho-mqtt clients."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from enmesh.mqtt.topics import ADDRESSES_FILE
from tests.support.amqp import Account
from tests.support.mesh import SAMPLE_MODEL, Mesh, wait_until
from tests.support.pki import router_client
from tests.support.ports import free_port, port_is_listening
from tests.support.stack import brokered_mesh

# The sample model plus `wills@iot`, the account that publishes wills after a restart.
WILL_ACCOUNT = """
---
apiVersion: enmesh.io/v1
kind: MessagingUser
metadata: {name: iot.wills}
spec:
  addressSpace: iot
  username: wills
  authentication:
    passwordSecret: {name: iot-wills, key: password}
  authorization:
    - operations: [send]
      addresses: [telemetry, broadcast, alerts, events]
"""

# Addresses with levels, for wildcard subscriptions: three multicast, one queue (which
# wildcards leave out), a user who may read all of them and one who may read truck t1's.
FLEET = "".join(
    f"""
---
apiVersion: enmesh.io/v1
kind: Address
metadata: {{name: iot.{address.replace("/", "-")}}}
spec: {{addressSpace: iot, address: {address}, type: {kind}, plan: standard-{kind}}}
"""
    for address, kind in (
        ("fleet/t1/position", "multicast"),
        ("fleet/t2/position", "multicast"),
        ("fleet/t1/fuel", "multicast"),
        ("fleet.t1.log", "queue"),  # stored addresses cannot contain '/' (RabbitMQ)
    )
) + "".join(
    f"""
---
apiVersion: enmesh.io/v1
kind: MessagingUser
metadata: {{name: iot.{user}}}
spec:
  addressSpace: iot
  username: {user}
  authentication:
    passwordSecret: {{name: iot-{user}, key: password}}
  authorization:
    - operations: [send, recv]
      addresses: ["{pattern}"]
"""
    for user, pattern in (("tracker", "fleet*"), ("dispatch", "fleet/t1/*"))
)


@pytest.fixture(scope="session")
def mqtt_mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    directory = tmp_path_factory.mktemp("mqtt-mesh")
    model = directory / "iot.model.yml"
    model.write_text(SAMPLE_MODEL.read_text() + WILL_ACCOUNT + FLEET)
    with brokered_mesh(directory, models=[model]) as mesh:
        yield mesh


@dataclass
class GatewayProcess:
    mesh: Mesh
    state: Path
    log: Path
    ports: dict[str, int] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None
    extra: tuple[str, ...] = ()
    tls: bool = False  # to the router's amqps listener (as deployed), else its amqp one

    def start(self) -> None:
        if not self.ports:
            self.ports = {kind: free_port() for kind in ("mqtt", "mqtts", "ws", "wss")}
        pki = self.mesh.extra["pki"]
        listen = [f"--listen={k}:127.0.0.1:{p}" for k, p in self.ports.items()]
        ca = ["--router-ca", str(self.mesh.ca)] if self.tls else []
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "enmesh.mqtt",
                    "--router",
                    self.mesh.url(0, tls=self.tls),
                    *ca,
                    *listen,
                    "--tls-cert",
                    str(pki.cert(router_client(0))),  # type: ignore[attr-defined]
                    "--tls-key",
                    str(pki.key(router_client(0))),  # type: ignore[attr-defined]
                    "--state-dir",
                    str(self.state),
                    *self.extra,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_until(
            lambda: self._alive() and all(port_is_listening(p) for p in self.ports.values()),
            20,
            "the MQTT gateway to listen",
        )

    def _alive(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"gateway exited:\n{self.log.read_text()[-3000:]}")
        return True

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, sig)
            self.process.wait(10)

    @property
    def port(self) -> int:
        return self.ports["mqtt"]


def start_gateway(
    mesh: Mesh, directory: Path, *extra: str, address_index: bool = True
) -> GatewayProcess:
    """A gateway in front of router 0, with a copy of the mesh's compiled address index
    (`directory/addresses.json`, which a test may change as `enmesh apply` would)."""
    if address_index:
        index = directory / "addresses.json"
        index.write_text((mesh.directory / "config" / ADDRESSES_FILE).read_text())
        extra = ("--addresses", str(index), *extra)
    gateway = GatewayProcess(mesh, directory / "state", directory / "gateway.log", extra=extra)
    gateway.start()
    return gateway


@pytest.fixture(scope="session")
def gateway(mqtt_mesh: Mesh, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    process = start_gateway(mqtt_mesh, tmp_path_factory.mktemp("gateway"))
    try:
        yield process
    finally:
        process.stop()


def amqp_account(mesh: Mesh, identity: str, router: int = 1) -> Account:
    return Account(mesh.url(router), identity, mesh.passwords[identity], identity.split("@")[1])


class Device:
    """A paho-mqtt client whose callbacks land in queues the test reads with a timeout."""

    def __init__(
        self,
        port: int,
        identity: str,
        password: str,
        *,
        version: int = mqtt.MQTTv5,
        client_id: str = "",
        transport: str = "tcp",
        ca: Path | None = None,
        will: tuple[str, bytes, int] | tuple[str, bytes, int, bool] | None = None,
        will_props: Any = None,
        clean_session: bool | None = None,
    ) -> None:
        self.client = mqtt.Client(
            CallbackAPIVersion.VERSION2,
            client_id=client_id,
            protocol=version,
            transport=transport,  # type: ignore[arg-type]
            clean_session=clean_session,  # 3.1.1 only; 5.0: `clean_start`
        )
        self.client.username_pw_set(identity, password)
        if transport == "websockets":
            self.client.ws_set_options(path="/mqtt")
        if ca is not None:
            self.client.tls_set(ca_certs=str(ca))
        if will is not None:
            retain = bool(will[3]) if len(will) > 3 else False
            self.client.will_set(will[0], will[1], will[2], retain, properties=will_props)
        self.connects: queue.Queue[Any] = queue.Queue()
        self.messages: queue.Queue[mqtt.MQTTMessage] = queue.Queue()
        self.acks: queue.Queue[tuple[int, Any]] = queue.Queue()
        self.subacks: queue.Queue[list[Any]] = queue.Queue()
        self.disconnects: queue.Queue[Any] = queue.Queue()
        self.session_present: bool | None = None  # the last CONNACK's flag
        self.client.on_connect = self._on_connect
        self.client.on_message = lambda c, u, m: self.messages.put(m)
        self.client.on_publish = lambda c, u, mid, rc, p: self.acks.put((mid, rc))
        self.client.on_subscribe = lambda c, u, mid, rcs, p: self.subacks.put(rcs)
        self.client.on_disconnect = lambda c, u, f, rc, p: self.disconnects.put(rc)
        self.port = port
        self.connect_properties: Any = None
        self.clean_start: Any = mqtt.MQTT_CLEAN_START_FIRST_ONLY  # 5.0

    def _on_connect(self, client: Any, userdata: Any, flags: Any, rc: Any, props: Any) -> None:
        self.session_present = bool(flags.session_present)
        self.connects.put(rc)

    def connect(self, timeout: float = 10) -> Any:
        """Connect and return the CONNACK's reason code."""
        clean = {"clean_start": self.clean_start} if self.client.protocol == mqtt.MQTTv5 else {}
        self.client.connect(
            "127.0.0.1", self.port, keepalive=30, properties=self.connect_properties, **clean
        )
        self.client.loop_start()
        return self.connects.get(timeout=timeout)

    def subscribe(self, topic: str, qos: int = 0, timeout: float = 10) -> list[Any]:
        self.client.subscribe(topic, qos)
        return self.subacks.get(timeout=timeout)

    def publish(self, topic: str, payload: bytes, qos: int = 0, timeout: float = 10) -> Any:
        """Publish; for QoS 1 return the PUBACK's reason code."""
        self.client.publish(topic, payload, qos)
        return self.acks.get(timeout=timeout)[1]

    def receive(self, timeout: float = 10) -> mqtt.MQTTMessage:
        return self.messages.get(timeout=timeout)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()

    def kill(self) -> None:
        """The socket dropped without DISCONNECT, as when a device loses power."""
        self.client.loop_stop()
        sock = self.client.socket()
        if sock is not None:
            sock.close()


@pytest.fixture
def device_factory(mqtt_mesh: Mesh, gateway: GatewayProcess) -> Iterator[Any]:
    made: list[Device] = []

    def make(identity: str, **options: Any) -> Device:
        password = options.pop("password", None) or mqtt_mesh.passwords[identity]
        port = options.pop("port", gateway.port)
        device = Device(port, identity, password, **options)
        made.append(device)
        return device

    yield make
    for device in made:
        with contextlib.suppress(Exception):  # already closed or never connected
            device.close()
