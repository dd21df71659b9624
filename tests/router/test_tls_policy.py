"""TLS policy on every TLS port of a stack (issue 20): routers and RabbitMQ, real openssl.

The stack's `tls` policy (default: TLS 1.2 minimum, AEAD suites with forward secrecy)
is compiled into the routers' sslProfiles and RabbitMQ's `ssl_options`; the RabbitMQ here
runs with the `ssl_options` lines of the local stack's compiled rabbitmq.conf. The probing
client allows what an old or hostile client would (`@SECLEVEL=0`: TLS 1.0/1.1, SHA1), so a
refusal is the server's.

A TLS-only (`requireSsl`) router listener must not speak AMQP or SASL in plaintext: a client
that sends a protocol header instead of a TLS ClientHello gets nothing back and is closed.
"""

from __future__ import annotations

import re
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from proton import ConnectionException, SSLDomain
from proton.utils import BlockingConnection

from enmesh.compile import compile_stack_file
from enmesh.router.config import Role, load_router_config
from tests.support.mesh import Mesh, build_mesh, wait_until
from tests.support.pki import router_inter_router
from tests.support.ports import HOST, free_port_block
from tests.support.rabbitmq import RabbitMQBroker

ROOT = Path(__file__).resolve().parents[2]
LOCAL_STACK = ROOT / "stacks" / "local.stack.yml"
AMQP_SASL_HEADER = b"AMQP\x03\x01\x00\x00"
SASL_MECHANISMS = b"\x00S@"  # described type 0x...40: the sasl-mechanisms frame
WEAK_CLIENT = ("-cipher", "DEFAULT:@SECLEVEL=0")  # offers TLS 1.0/1.1 and SHA1 suites
SSL_TIMEOUT = 30.0


@dataclass(frozen=True)
class Endpoint:
    name: str
    port: int
    ca: Path
    client_cert: tuple[Path, Path] | None = None  # inter-router: mutual TLS


def negotiated(endpoint: Endpoint, *options: str) -> str | None:
    """The TLS version `openssl s_client` agrees on with `endpoint`, or None if refused."""
    command = ["openssl", "s_client", "-brief", "-connect", f"{HOST}:{endpoint.port}"]
    command += ["-CAfile", str(endpoint.ca), *options]
    if endpoint.client_cert:
        command += ["-cert", str(endpoint.client_cert[0]), "-key", str(endpoint.client_cert[1])]
    result = subprocess.run(
        command, input=b"", capture_output=True, timeout=SSL_TIMEOUT, check=False
    )
    found = re.search(rb"^Protocol version: (\S+)", result.stderr, re.M)
    return found[1].decode() if found and result.returncode == 0 else None


def inter_router_port(mesh: Mesh, index: int) -> int:
    config = load_router_config(mesh.routers[index].config)
    return next(
        listener.port for listener in config.listeners if listener.role is Role.INTER_ROUTER
    )


def compiled_broker_tls_lines() -> list[str]:
    """The TLS policy lines of the local stack's compiled rabbitmq.conf."""
    _, artefacts = compile_stack_file(LOCAL_STACK)
    conf = artefacts.files["brokers/broker-0.rabbitmq.conf"]
    policy = ("ssl_options.versions.", "ssl_options.ciphers.", "ssl_options.honor_")
    lines = [line for line in conf.splitlines() if line.startswith(policy)]
    assert any(line.startswith("ssl_options.versions.") for line in lines), conf
    return lines


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RabbitMQBroker, int]]:
    """RabbitMQ with the compiled TLS policy, AMQPS and an MQTT TLS listener."""
    mqtts = free_port_block(1)
    extra = [
        *compiled_broker_tls_lines(),
        "mqtt.listeners.tcp = none",
        f"mqtt.listeners.ssl.default = {HOST}:{mqtts}",
    ]
    with RabbitMQBroker(
        directory=tmp_path_factory.mktemp("rabbitmq-tls"),
        definitions=None,
        extra_config=extra,
        plugins=("rabbitmq_amqp1_0", "rabbitmq_mqtt"),
    ) as running:
        yield running, mqtts


@pytest.fixture(scope="module")
def endpoints(full_mesh: Mesh, broker: tuple[RabbitMQBroker, int]) -> dict[str, Endpoint]:
    pki = full_mesh.extra["pki"]
    client = (pki.cert(router_inter_router(1)), pki.key(router_inter_router(1)))  # type: ignore[attr-defined]
    rabbit, mqtts = broker
    return {
        "router-amqps": Endpoint("router-amqps", full_mesh.routers[0].amqps_port, full_mesh.ca),
        "router-inter-router": Endpoint(
            "router-inter-router", inter_router_port(full_mesh, 0), full_mesh.ca, client
        ),
        "rabbitmq-amqps": Endpoint("rabbitmq-amqps", rabbit.tls_port, rabbit.ca_cert),
        "rabbitmq-mqtts": Endpoint("rabbitmq-mqtts", mqtts, rabbit.ca_cert),
    }


ENDPOINTS = ("router-amqps", "router-inter-router", "rabbitmq-amqps", "rabbitmq-mqtts")


@pytest.mark.parametrize("version", ["-tls1", "-tls1_1"])
@pytest.mark.parametrize("name", ENDPOINTS)
def test_tls_before_1_2_is_refused(endpoints: dict[str, Endpoint], name: str, version: str) -> None:
    assert negotiated(endpoints[name], version, *WEAK_CLIENT) is None


@pytest.mark.parametrize("name", ENDPOINTS)
def test_cbc_sha1_suites_are_refused(endpoints: dict[str, Endpoint], name: str) -> None:
    # The suite the probe got on TLS 1.0; over TLS 1.2 it is just as unwanted.
    assert negotiated(endpoints[name], "-tls1_2", "-cipher", "ECDHE-ECDSA-AES256-SHA") is None


@pytest.mark.parametrize(("version", "expected"), [("-tls1_2", "TLSv1.2"), ("-tls1_3", "TLSv1.3")])
@pytest.mark.parametrize("name", ENDPOINTS)
def test_tls_1_2_and_1_3_are_served(
    endpoints: dict[str, Endpoint], name: str, version: str, expected: str
) -> None:
    assert negotiated(endpoints[name], version, *WEAK_CLIENT) == expected


# --- TLS first on requireSsl listeners -------------------------------------------------


def reply_to_sasl_header(port: int) -> tuple[bytes, bool]:
    """Send a plaintext AMQP-SASL header; return what came back and whether it was closed."""
    received = b""
    with socket.create_connection((HOST, port), timeout=SSL_TIMEOUT) as sock:
        sock.sendall(AMQP_SASL_HEADER)
        try:
            while SASL_MECHANISMS not in received:
                chunk = sock.recv(4096)
                if not chunk:
                    return received, True
                received += chunk
        except ConnectionResetError:
            return received, True
    return received, False  # a mechanisms frame: the router is running SASL in plaintext


def test_plaintext_sasl_on_the_amqp_port_still_works(full_mesh: Mesh) -> None:
    """The probe's control: where plaintext is allowed, the mechanisms frame does come."""
    received, closed = reply_to_sasl_header(full_mesh.routers[0].amqp_port)
    assert received.startswith(AMQP_SASL_HEADER) and SASL_MECHANISMS in received
    assert not closed


@pytest.mark.parametrize("listener", ["amqps", "inter-router"])
def test_plaintext_client_gets_no_sasl_on_a_tls_listener(full_mesh: Mesh, listener: str) -> None:
    router = full_mesh.routers[1]
    port = router.amqps_port if listener == "amqps" else inter_router_port(full_mesh, 1)
    received, closed = reply_to_sasl_header(port)
    assert received == b"" and closed


def test_plaintext_scram_login_on_amqps_is_refused_and_logged_once(full_mesh: Mesh) -> None:
    router = full_mesh.routers[2]
    identity = "device@iot"
    with pytest.raises(ConnectionException):
        BlockingConnection(
            f"amqp://127.0.0.1:{router.amqps_port}",
            timeout=SSL_TIMEOUT,
            user=identity,
            password=full_mesh.passwords[identity],
            allowed_mechs="SCRAM-SHA-256",
            virtual_host="iot",
        )
    marker = "refused: TLS required, client sent b'AMQP\\\\x03"
    wait_until(lambda: marker in router.log.read_text(), 10, "the router to log the refusal")
    # The proper client is unaffected: the same login over TLS opens.
    domain = SSLDomain(SSLDomain.MODE_CLIENT)
    domain.set_trusted_ca_db(str(full_mesh.ca))
    domain.set_peer_authentication(SSLDomain.VERIFY_PEER)
    BlockingConnection(
        f"amqps://127.0.0.1:{router.amqps_port}",
        timeout=SSL_TIMEOUT,
        ssl_domain=domain,
        user=identity,
        password=full_mesh.passwords[identity],
        allowed_mechs="SCRAM-SHA-256",
        virtual_host="iot",
    ).close()


# --- tls.minVersion: "1.3" reaches the router ---------------------------------------------


@pytest.fixture(scope="module")
def tls13_mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    mesh = build_mesh(tmp_path_factory.mktemp("tls13"), routers=2, tls={"minVersion": "1.3"})
    try:
        mesh.start()
        mesh.wait_converged()  # the inter-router connectors speak TLS 1.3 too
        yield mesh
    finally:
        mesh.stop()


def test_min_version_1_3_refuses_tls_1_2(tls13_mesh: Mesh) -> None:
    client = Endpoint("router-amqps", tls13_mesh.routers[0].amqps_port, tls13_mesh.ca)
    assert negotiated(client, "-tls1_2") is None
    assert negotiated(client, "-tls1_3") == "TLSv1.3"
