"""The running stack, checked from outside: processes, sockets, TLS, auth, messaging."""

from __future__ import annotations

import re
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from proton import ConnectionException, Message
from proton.utils import BlockingConnection

from enmesh.clients import connect_options
from enmesh.deploy import queue_depth
from enmesh.deploy.smoke import Stack
from enmesh.deploy.smoke_run import run_smoke
from tests.e2e.model_change import STACKS, changed_stack
from tests.support.mesh import wait_until

ROUTER_BROKER_PORTS = ("amqps", "mqtts", "prometheus")
WILDCARDS = {"0.0.0.0", "::", "[::]"}


def _programs(deployment: dict[str, Any]) -> list[str]:
    routers = [f"enmesh-router-{r['id']}" for r in deployment["routers"]]
    brokers = [f"enmesh-rabbitmq-{b['name']}" for b in deployment["brokers"]]
    return [*routers, *brokers, "enmesh-epmd"]


def test_every_program_runs_under_supervisord(host: Any, deployment: dict[str, Any]) -> None:
    for name in _programs(deployment):
        program = host.supervisor(name)
        assert program.is_running, f"{name}: {program.status}"


def test_sockets_listen_only_on_loopback(host: Any, deployment: dict[str, Any]) -> None:
    listening = host.socket.get_listening_sockets()
    expected = [
        f"tcp://{r['host']}:{port}" for r in deployment["routers"] for port in r["ports"].values()
    ] + [
        f"tcp://{b['host']}:{b['ports'][name]}"
        for b in deployment["brokers"]
        for name in ROUTER_BROKER_PORTS
    ]
    missing = [s for s in expected if s not in listening]
    assert not missing, f"not listening: {missing}"
    ours = {s.rsplit(":", 1)[1] for s in expected} | {"4369", "25672"}
    wildcard = [
        s
        for s in listening
        if s.rsplit(":", 1)[1] in ours and s.split("//", 1)[1].rsplit(":", 1)[0] in WILDCARDS
    ]
    assert not wildcard, f"listening on every interface: {wildcard}"


def _tls_handshake(port: int, ca: str | None, name: str) -> str:
    context = ssl.create_default_context(cafile=ca) if ca else ssl.create_default_context()
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=name) as tls,
    ):
        return str(tls.version())


def test_tls_verifies_against_the_stack_ca(
    deployment: dict[str, Any], endpoints: dict[str, Any]
) -> None:
    ports = [r["ports"]["amqps"] for r in deployment["routers"]]
    ports += [b["ports"]["amqps"] for b in deployment["brokers"]]
    for port in ports:
        assert _tls_handshake(port, endpoints["ca"], "localhost").startswith("TLS")
        with pytest.raises(ssl.SSLCertVerificationError):
            _tls_handshake(port, None, "localhost")  # the system CAs do not know ours


def test_plain_amqp_is_refused_where_tls_is_required(
    deployment: dict[str, Any], stack: Stack
) -> None:
    # Routers: a plaintext client with the right password never gets an AMQP connection.
    password = stack.password("device@iot")
    for router in deployment["routers"]:
        url = f"amqp://{router['host']}:{router['ports']['amqps']}"
        with pytest.raises(ConnectionException, match=r"protocol header|SSL|TLS|aborted"):
            BlockingConnection(
                url,
                timeout=15,
                user="device@iot",
                password=password,
                virtual_host="iot",
                allowed_mechs="SCRAM-SHA-256",
            )
    # Brokers: the TLS listener does not speak AMQP in the clear at all.
    for broker in deployment["brokers"]:
        with socket.create_connection(("127.0.0.1", broker["ports"]["amqps"]), timeout=10) as raw:
            raw.sendall(b"AMQP\x03\x01\x00\x00")
            try:
                answer = raw.recv(8)
            except (ConnectionResetError, TimeoutError):
                answer = b""
        assert not answer.startswith(b"AMQP"), f"broker {broker['name']} speaks plaintext AMQP"


def _broker_connections(router: dict[str, Any]) -> int:
    """Open route-container (broker) connections, from the router's /metrics."""
    url = f"http://{router['host']}:{router['ports']['metrics']}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    found = re.search(
        r'^enmesh_router_connections\{[^}]*role="route-container"\} (\d+)', text, re.M
    )
    return int(found[1]) if found else 0


def _connect(stack: Stack, url: str, user: str, password: str, vhost: str) -> BlockingConnection:
    options = connect_options(
        url, user=user, password=password, vhost=vhost, ca=stack.ca, mechanisms="SCRAM-SHA-256"
    )
    options.pop("reconnect")
    return BlockingConnection(timeout=30, **options)


def test_wrong_password_is_refused(stack: Stack) -> None:
    with pytest.raises(ConnectionException, match=r"unauthorized|Authentication failed"):
        _connect(stack, stack.urls[0], "device@iot", "not-the-password", "iot")
    right = _connect(stack, stack.urls[0], "device@iot", stack.password("device@iot"), "iot")
    right.close()


def test_device_cannot_reach_another_tenant_or_read_telemetry(stack: Stack) -> None:
    password = stack.password("device@iot")
    with pytest.raises(ConnectionException):
        _connect(stack, stack.urls[0], "device@iot", password, "acme")
    connection = _connect(stack, stack.urls[0], "device@iot", password, "iot")
    try:
        with pytest.raises(Exception, match=r"unauthorized|refused|not allowed"):
            connection.create_receiver("telemetry")
    finally:
        connection.close()


def test_every_address_type_across_routers(stack: Stack) -> None:
    lines: list[str] = []
    assert run_smoke(stack, lines.append), "\n".join(lines)
    checked = {line.split()[1] for line in lines if line.split()[0] == "ok"}
    # The local stack runs the MQTT gateway (spec.mqtt), so the smoke check covers it too.
    assert checked == {
        "anycast",
        "multicast",
        "queue",
        "topic",
        "subscription",
        "deadletter",
        "mqtt",
    }


def test_the_smoke_check_leaves_stored_messages_alone(
    stack: Stack, deployment: dict[str, Any]
) -> None:
    # A stored alert (the telemetry job publishes them; the `audit` subscription keeps
    # them) makes the subscription and topic checks skip, not fail, and is never
    # attached to: a look would count as a delivery attempt on RabbitMQ 3.10.
    body = f"stored alert {time.time_ns()}"
    with stack.connect(stack.urls[0], "backend@iot", "iot") as sender_connection:
        sender_connection.create_sender("alerts").send(Message(body=body, durable=True))

    def audit_depth() -> int:
        return queue_depth.read(deployment["brokers"]).get("iot.audit", 0)

    wait_until(lambda: audit_depth() == 1, 30, "the alert to be stored in iot.audit")
    lines: list[str] = []
    assert run_smoke(stack, lines.append), "\n".join(lines)
    skipped = {line.split()[1] for line in lines if line.split()[0] == "skip"}
    assert skipped == {"subscription", "topic"}, "\n".join(lines)
    assert audit_depth() == 1
    with stack.connect(stack.urls[-1], "backend@iot", "iot") as receiver_connection:
        receiver = receiver_connection.create_receiver("alerts::audit", credit=1)
        stored = receiver.receive(timeout=30)
        receiver.accept()
    assert (stored.body, stored.delivery_count) == (body, 0)


def test_queue_messages_survive_a_broker_restart(
    host: Any, stack: Stack, deployment: dict[str, Any]
) -> None:
    bodies = [f"durable {time.time_ns()} {i}" for i in range(20)]
    backend = stack.password("backend@iot")
    connection = _connect(stack, stack.urls[0], "backend@iot", backend, "iot")
    sender = connection.create_sender("commands")
    for body in bodies:
        sender.send(Message(body=body, durable=True))
    connection.close()

    broker = deployment["brokers"][0]["name"]
    restart = host.run(f"supervisorctl restart enmesh-rabbitmq-{broker}")
    assert restart.rc == 0, restart.stderr
    host.run_test("rabbitmqctl --node rabbit@localhost await_startup --timeout 120")

    # Ready again when every router has its broker connection back (they retry with backoff).
    for router in deployment["routers"]:
        wait_until(
            lambda router=router: _broker_connections(router) > 0,
            timeout=90,
            what=f"{router['id']} to reconnect to the broker",
            interval=0.2,
        )
    device = stack.password("device@iot")
    received: list[str] = []
    consumer = _connect(stack, stack.urls[-1], "device@iot", device, "iot")
    receiver = consumer.create_receiver("commands", credit=50)
    while len(received) < len(bodies):
        message = receiver.receive(timeout=30)
        receiver.accept()
        if str(message.body).startswith("durable"):
            received.append(str(message.body))
    consumer.close()
    assert sorted(received) == sorted(bodies)


def _apply(stack_file: Path) -> str:
    """`enmesh apply` as an operator runs it on this host (supervisord, rabbit@localhost)."""
    result = subprocess.run(
        [sys.executable, "-m", "enmesh.cli", "apply", "--stack", str(stack_file)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_a_model_change_is_applied_live_and_undone(
    host: Any, deployment: dict[str, Any], stack: Stack, tmp_path: Path
) -> None:
    """The path `make up` takes for a changed model: no router restarts (same pids), the new
    queue carries a message, and applying the deployed model again restores it exactly."""
    routers = [f"enmesh-router-{r['id']}" for r in deployment["routers"]]
    pids = {name: host.supervisor(name).pid for name in routers}
    stacks = STACKS
    stack_file = changed_stack(tmp_path)
    try:
        out = _apply(stack_file)
        assert "+ address iot/e2e-live" in out and "+ queue enmesh/iot.e2e-live" in out, out
        with stack.connect(stack.urls[0], "device@iot", "iot") as connection:
            connection.create_sender("e2e-live").send(Message(body="live"))
        with stack.connect(stack.urls[-1], "backend@iot", "iot") as connection:
            receiver = connection.create_receiver("e2e-live")
            assert receiver.receive(timeout=30).body == "live"
            receiver.accept()
    finally:
        undone = _apply(stacks / "local.stack.yml")
    assert "- queue enmesh/iot.e2e-live" in undone, undone
    assert "no changes" in _apply(stacks / "local.stack.yml")
    assert {name: host.supervisor(name).pid for name in routers} == pids
