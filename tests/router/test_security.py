"""Tenancy, authorization, SASL and TLS on real router listeners."""

from __future__ import annotations

import socket
import ssl
from dataclasses import replace
from pathlib import Path
from typing import Any

from proton import Message

from tests.router.conftest import account
from tests.support.amqp import Account, Scenario, run
from tests.support.mesh import Mesh, build_mesh


class TenantIsolation(Scenario):
    """`telemetry` exists in iot and acme: acme traffic must never reach iot consumers."""

    def __init__(self, mesh: Mesh, count: int) -> None:
        super().__init__()
        self.mesh, self.count = mesh, count
        self.iot_bodies: list[str] = []
        self.acme_received = self.ready = 0
        self.acme_sent = 0
        self.marker_sent = False

    def on_start(self, event: Any) -> None:
        iot = self.open(account(self.mesh, 1, "backend@iot"))
        event.container.create_receiver(iot, "telemetry", name="iot-consumer")
        acme = self.open(account(self.mesh, 2, "app@acme"))
        event.container.create_receiver(acme, "telemetry", name="acme-consumer")

    def on_link_opened(self, event: Any) -> None:
        if event.link.name.endswith("-consumer"):
            self.ready += 1
            if self.ready == 2:
                acme = self.open(account(self.mesh, 0, "app@acme"))
                event.container.create_sender(acme, "telemetry", name="acme-producer")

    def on_sendable(self, event: Any) -> None:
        if event.sender.name == "acme-producer":
            while event.sender.credit and self.acme_sent < self.count:
                event.sender.send(Message(body="acme"))
                self.acme_sent += 1
        elif event.sender.name == "iot-producer" and not self.marker_sent:
            event.sender.send(Message(body="iot-marker"))
            self.marker_sent = True

    def on_message(self, event: Any) -> None:
        if event.receiver.name == "acme-consumer":
            self.acme_received += 1
            if self.acme_received == self.count:
                # All acme messages are delivered; now prove the iot consumer is live.
                iot = self.open(account(self.mesh, 0, "device@iot"))
                event.container.create_sender(iot, "telemetry", name="iot-producer")
        else:
            self.iot_bodies.append(event.message.body)
            if event.message.body == "iot-marker":
                self.done()


def test_same_address_in_two_tenants_never_crosses(full_mesh: Mesh) -> None:
    scenario = run(TenantIsolation(full_mesh, 200), timeout=30)
    assert scenario.acme_received == 200
    assert scenario.iot_bodies == ["iot-marker"]


class Refusals(Scenario):
    """Links a user has no right to are refused with amqp:unauthorized-access."""

    def __init__(self, mesh: Mesh) -> None:
        super().__init__()
        self.mesh = mesh
        self.outcomes: dict[str, str] = {}

    def on_start(self, event: Any) -> None:
        device = self.open(account(self.mesh, 0, "device@iot"))
        event.container.create_sender(device, "commands", name="device-sends-commands")
        event.container.create_receiver(device, "telemetry", name="device-reads-telemetry")
        event.container.create_sender(device, "telemetry", name="device-sends-telemetry")

    def on_link_opened(self, event: Any) -> None:
        if event.link.remote_condition is None:
            self.outcomes[event.link.name] = "open"
            self._check()

    def on_link_error(self, event: Any) -> None:
        condition = event.link.remote_condition
        self.outcomes[event.link.name] = condition.name
        self._check()

    def _check(self) -> None:
        if len(self.outcomes) == 3:
            self.done()


def test_links_without_rights_are_refused(full_mesh: Mesh) -> None:
    outcomes = run(Refusals(full_mesh), timeout=30).outcomes
    assert outcomes == {
        "device-sends-commands": "amqp:unauthorized-access",
        "device-reads-telemetry": "amqp:unauthorized-access",
        "device-sends-telemetry": "open",
    }


class Login(Scenario):
    """Connect and attach one link: `opened` only if the router really let us in."""

    def __init__(self, target: Account) -> None:
        super().__init__()
        self.target = target
        self.opened = False

    def on_start(self, event: Any) -> None:
        connection = self.open(self.target)
        event.container.create_sender(connection, "telemetry", name="probe")

    def on_link_opened(self, event: Any) -> None:
        self.opened = True
        self.done()

    def on_transport_error(self, event: Any) -> None:
        super().on_transport_error(event)
        self.done()

    def on_connection_error(self, event: Any) -> None:
        super().on_connection_error(event)
        self.done()


def test_wrong_password_is_refused_as_unauthorized(full_mesh: Mesh) -> None:
    wrong = replace(account(full_mesh, 0, "device@iot"), password="not-the-password")
    scenario = run(Login(wrong), timeout=15)
    assert not scenario.opened
    assert any(e.startswith("amqp:unauthorized-access") for e in scenario.errors), scenario.errors


def test_unknown_address_space_is_refused(full_mesh: Mesh) -> None:
    elsewhere = replace(account(full_mesh, 0, "device@iot"), vhost="nowhere")
    scenario = run(Login(elsewhere), timeout=15)
    assert not scenario.opened
    assert any("no address space 'nowhere'" in e for e in scenario.errors), scenario.errors


def test_a_user_of_one_space_is_refused_by_another(full_mesh: Mesh) -> None:
    """The sample model's acme space does not allow unknown users: iot's device is one."""
    other_tenant = replace(account(full_mesh, 0, "device@iot"), vhost="acme")
    scenario = run(Login(other_tenant), timeout=15)
    assert not scenario.opened
    assert any(
        e.startswith("amqp:unauthorized-access") and "'acme'" in e for e in scenario.errors
    ), scenario.errors


def test_plain_over_tls_with_verified_server_certificate(full_mesh: Mesh) -> None:
    scenario = run(Login(account(full_mesh, 0, "device@iot", tls=True)), timeout=15)
    assert scenario.opened, scenario.errors


def test_tls_listener_refuses_plain_amqp(full_mesh: Mesh) -> None:
    plain = replace(
        account(full_mesh, 0, "device@iot"),
        url=full_mesh.url(0, tls=True).replace("amqps://", "amqp://"),
    )
    scenario = run(Login(plain), timeout=15)
    assert not scenario.opened


def test_server_certificate_chains_to_the_stack_ca(full_mesh: Mesh) -> None:
    context = ssl.create_default_context(cafile=str(full_mesh.ca))
    port = full_mesh.routers[0].amqps_port
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        assert tls.version() in ("TLSv1.2", "TLSv1.3")
        assert tls.getpeercert() is not None


def test_anonymous_is_refused_where_no_space_allows_it(full_mesh: Mesh) -> None:
    anonymous = replace(account(full_mesh, 0, "device@iot"), identity=None, password=None)
    scenario = run(Login(anonymous), timeout=15)
    assert not scenario.opened
    assert any("unauthorized-access" in e for e in scenario.errors), scenario.errors


LIMITED_MODEL = """\
apiVersion: enmesh.io/v1
kind: AddressPlan
metadata: {name: anycast}
spec: {addressType: anycast}
---
apiVersion: enmesh.io/v1
kind: AddressSpacePlan
metadata: {name: tiny}
spec:
  addressSpaceType: standard
  resourceLimits: {connections: 2, addresses: 5}
  addressPlans: [anycast]
---
apiVersion: enmesh.io/v1
kind: AddressSpace
metadata: {name: small}
spec: {type: standard, plan: tiny}
---
apiVersion: enmesh.io/v1
kind: Address
metadata: {name: small.pings}
spec: {addressSpace: small, address: pings, type: anycast, plan: anycast}
---
apiVersion: enmesh.io/v1
kind: MessagingUser
metadata: {name: small.app}
spec:
  addressSpace: small
  username: app
  authentication: {passwordSecret: {name: small-app, key: password}}
  authorization: [{operations: [send, recv], addresses: [pings]}]
"""


class Crowd(Scenario):
    """Open `count` connections as the same user; record which get in."""

    def __init__(self, target: Account, count: int) -> None:
        super().__init__()
        self.target, self.count = target, count
        self.admitted = 0
        self.refused: list[str] = []

    def on_start(self, event: Any) -> None:
        for i in range(self.count):
            event.container.create_sender(self.open(self.target), "pings", name=f"p{i}")

    def on_link_opened(self, event: Any) -> None:
        self.admitted += 1
        self._check()

    def on_connection_error(self, event: Any) -> None:
        self.refused.append(event.connection.remote_condition.name)
        self._check()

    def _check(self) -> None:
        if self.admitted + len(self.refused) == self.count:
            self.done()


def test_address_space_connection_limit(tmp_path: Path) -> None:
    model = tmp_path / "limited.model.yml"
    model.write_text(LIMITED_MODEL)
    mesh = build_mesh(tmp_path / "mesh", routers=1, models=[model])
    try:
        mesh.start()
        user = Account(mesh.url(0), "app@small", mesh.passwords["app@small"], "small")
        scenario = run(Crowd(user, 3), timeout=30)
    finally:
        mesh.stop()
    assert scenario.admitted == 2
    assert scenario.refused == ["amqp:resource-limit-exceeded"]
