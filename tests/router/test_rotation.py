"""Rotating certificates and passwords on a running router, without a restart.

The router builds its TLS context again when an sslProfile file changes (checked for every
TLS connection it accepts), and Cyrus reads the sasldb for every login, so a renewed
certificate or a changed password takes effect for the next connection while established
ones carry on (docs/security.md).
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
from proton import ConnectionException
from proton.utils import BlockingConnection

from tests.router.conftest import account
from tests.support.mesh import Mesh, build_mesh
from tests.support.pki import Pki, broker_component, reissue, router_client
from tests.support.rabbitmq import RabbitMQBroker
from tests.support.sasl import make_sasldb

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    running = build_mesh(tmp_path_factory.mktemp("rotation"), routers=1)
    running.start()
    try:
        yield running
    finally:
        running.stop()


def served_serial(mesh: Mesh) -> str:
    """The serial number of the certificate the router's TLS listener presents now."""
    return served_serial_at(mesh.routers[0].amqps_port, mesh.ca)


def served_serial_at(port: int, ca: Path) -> str:
    context = ssl.create_default_context(cafile=str(ca))
    context.check_hostname = False
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw) as tls,
    ):
        return str(tls.getpeercert()["serialNumber"])


def open_pair(mesh: Mesh) -> tuple[BlockingConnection, BlockingConnection]:
    """backend@iot receiving and device@iot sending on `telemetry`, both over TLS."""
    consumer = account(mesh, 0, "backend@iot", tls=True).blocking()
    producer = account(mesh, 0, "device@iot", tls=True).blocking()
    return consumer, producer


def attach_on_both(consumer: BlockingConnection, producer: BlockingConnection) -> None:
    """Both connections still attach links (a round trip each; raises if they cannot)."""
    receiver = consumer.create_receiver("telemetry", credit=1)
    sender = producer.create_sender("telemetry")
    sender.close()
    receiver.close()


def test_a_renewed_certificate_serves_new_connections_and_old_ones_stay(mesh: Mesh) -> None:
    consumer, producer = open_pair(mesh)
    try:
        before = served_serial(mesh)
        pki: Pki = mesh.extra["pki"]  # type: ignore[assignment]
        reissue(pki, router_client(0), hostnames=("localhost", "127.0.0.1", "iot", "acme"))
        assert served_serial(mesh) != before
        attach_on_both(consumer, producer)
        fresh_consumer, fresh_producer = open_pair(mesh)  # verified against the same CA
        attach_on_both(fresh_consumer, fresh_producer)
        fresh_consumer.close()
        fresh_producer.close()
    finally:
        consumer.close()
        producer.close()


def test_a_changed_password_applies_to_the_next_login_only(mesh: Mesh) -> None:
    consumer, producer = open_pair(mesh)
    sasldb = Path(mesh.directory) / "state" / "auth" / "enmesh.sasldb"
    old = mesh.passwords["device@iot"]
    try:
        make_sasldb(sasldb, {"device@iot": old + "-rotated"})
        with pytest.raises(ConnectionException, match=r"unauthorized-access|Authentication"):
            account(mesh, 0, "device@iot").blocking().close()
        mesh.passwords["device@iot"] = old + "-rotated"
        account(mesh, 0, "device@iot").blocking().close()
        attach_on_both(consumer, producer)
    finally:
        make_sasldb(sasldb, {"device@iot": old})
        mesh.passwords["device@iot"] = old
        consumer.close()
        producer.close()


def test_rabbitmq_serves_a_renewed_certificate_after_clearing_its_pem_cache(
    tmp_path: Path,
) -> None:
    """Erlang's ssl application caches certificate files: new files alone are not enough
    (what the rabbitmq role does after installing renewed ones: docs/security.md)."""
    with RabbitMQBroker(directory=tmp_path / "rabbitmq", definitions=None) as broker:
        assert broker.pki is not None
        before = served_serial_at(broker.tls_port, broker.ca_cert)
        reissue(broker.pki, broker_component(broker.broker_name))
        assert served_serial_at(broker.tls_port, broker.ca_cert) == before  # still cached
        broker.ctl("eval", "ssl:clear_pem_cache().")
        assert served_serial_at(broker.tls_port, broker.ca_cert) != before
