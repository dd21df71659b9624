"""Self-tests of tests/support, and the broker facts the enmesh compiler relies on.

The SASL part is also a reference for the router author: `_SaslServer` is a complete
python-qpid-proton server that authenticates with Cyrus SASL from a sasldb and the
compiled `qdrouterd.conf` SASL configuration (see `tests.support.sasl` for the realm
findings it verifies).

The RabbitMQ part runs the compiled definitions of the local stack on a real RabbitMQ
3.10 and checks, with real AMQP 1.0 clients over TLS, what the router configs assume.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import socket
import stat
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from proton import (
    SASL,
    Delivery,
    Endpoint,
    Message,
    ProtonException,
    SSLDomain,
    Timeout,
    symbol,
)
from proton.handlers import MessagingHandler
from proton.reactor import Container
from proton.utils import BlockingConnection

from tests.support import fixtures as support_fixtures
from tests.support.pki import (
    broker_component,
    make_pki,
    router_client,
    router_inter_router,
    stack_components,
)
from tests.support.ports import HOST, free_port, free_port_block, port_is_listening
from tests.support.rabbitmq import (
    ROUTER_USER,
    RabbitMQBroker,
    client_ssl_domain,
    node_processes,
    parse_queue_arguments,
)
from tests.support.rabbitmq import rabbitmq_broker as start_broker
from tests.support.sasl import list_sasldb, make_sasldb, split_identity, write_sasl_config

# The shared fixtures, imported explicitly (tests/conftest.py may re-export them later).
rendered_local_stack = support_fixtures.rendered_local_stack
rabbitmq_broker = support_fixtures.rabbitmq_broker

# ---------------------------------------------------------------------------------------
# ports


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def _ephemeral_low() -> int:
    return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])


def test_free_port_is_bindable_and_not_one_outgoing_connections_take() -> None:
    port = free_port()
    assert _bindable(port)
    assert 10000 <= port < _ephemeral_low()


def test_free_port_block_with_stride() -> None:
    base = free_port_block(3, stride=10)
    assert base >= 10000
    assert base + 20 < _ephemeral_low()
    assert all(_bindable(base + i * 10) for i in range(3))


def test_port_is_listening() -> None:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        sock.listen()
        assert port_is_listening(sock.getsockname()[1])
    assert not port_is_listening(free_port())


# ---------------------------------------------------------------------------------------
# PKI


def _openssl(*args: str) -> str:
    return subprocess.run(
        ["openssl", *args], capture_output=True, text=True, check=True, timeout=30
    ).stdout


def test_pki_files_match_compiled_router_configs(
    tmp_path: Path, rendered_local_stack: Path
) -> None:
    pki = make_pki(tmp_path / "tls", stack_components(3, ["broker-0"]))
    conf = (rendered_local_stack / "routers" / "local-router-1.conf").read_text()
    state_tls = "/var/lib/enmesh/tls/"
    referenced = sorted(set(re.findall(re.escape(state_tls) + r"(\S+)", conf)))
    assert referenced == [
        "ca.crt",
        "router-1-client.crt",
        "router-1-client.key",
        "router-1-inter-router.crt",
        "router-1-inter-router.key",
    ]
    for name in referenced:
        assert (pki.directory / name).is_file(), name
    assert pki.cert(router_client(1)).name == "router-1-client.crt"
    assert pki.key(router_inter_router(2)).name == "router-2-inter-router.key"
    assert broker_component("broker-0") == broker_component("0") == "broker-0"
    assert pki.cert("broker-0") == pki.directory / "broker-0.crt"


def test_pki_certificates(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "tls", ["router-0-client", "broker-0"])
    for pair in pki.pairs:
        _openssl("verify", "-x509_strict", "-CAfile", str(pki.ca_cert), str(pair.cert))
        text = _openssl("x509", "-in", str(pair.cert), "-noout", "-text")
        assert f"CN = {pair.component}" in text
        assert "DNS:localhost" in text
        assert "IP Address:127.0.0.1" in text
        assert "DNS:127.0.0.1" in text  # for proton's peer-name check, see pki.py
        assert "TLS Web Server Authentication, TLS Web Client Authentication" in text
        assert "CA:FALSE" in text
        assert stat.S_IMODE(pair.key.stat().st_mode) == 0o600
    assert stat.S_IMODE(pki.ca_key.stat().st_mode) == 0o600
    assert "CA:TRUE" in _openssl("x509", "-in", str(pki.ca_cert), "-noout", "-text")


def test_pki_rsa(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "tls", ["x"], key_type="rsa")
    assert "Public-Key: (2048 bit)" in _openssl(
        "x509", "-in", str(pki.cert("x")), "-noout", "-text"
    )


def test_pki_rejects_bad_components(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="duplicate"):
        make_pki(tmp_path, ["a", "a"])
    with pytest.raises(ValueError, match="bad component"):
        make_pki(tmp_path, ["ca"])


# ---------------------------------------------------------------------------------------
# SASL: files


def test_sasldb_and_config(tmp_path: Path, rendered_local_stack: Path) -> None:
    db = tmp_path / "enmesh.sasldb"
    make_sasldb(db, {"device@iot": "pw-1", "backend@iot": "pw-2"})
    assert sorted(list_sasldb(db)) == ["backend@iot: userPassword", "device@iot: userPassword"]
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    conf = write_sasl_config(tmp_path / "sasl2", db, "EXTERNAL PLAIN  SCRAM-SHA-256")
    assert conf == tmp_path / "sasl2" / "qdrouterd.conf"
    ours = conf.read_text().splitlines()
    compiled = (rendered_local_stack / "auth" / "sasl2" / "qdrouterd.conf").read_text()
    theirs = [line for line in compiled.splitlines() if not line.startswith("#")]
    assert [line.split(":")[0] for line in ours] == [line.split(":")[0] for line in theirs]
    assert f"sasldb_path: {db}" in ours
    assert "mech_list: EXTERNAL PLAIN SCRAM-SHA-256" in theirs
    assert "mech_list: EXTERNAL PLAIN SCRAM-SHA-256" in ours


def test_split_identity() -> None:
    assert split_identity("device@iot") == ("device", "iot")
    assert split_identity("a@b@iot") == ("a@b", "iot")
    for bad in ("device", "@iot", "device@"):
        with pytest.raises(ValueError):
            split_identity(bad)


# ---------------------------------------------------------------------------------------
# SASL: a real proton server and client
#
# Cyrus' server side is initialised once per process with the first server transport's
# config path, so the server runs in a child process of its own (spawned, not forked).

SASL_USERS = {"device@iot": "device-secret-1", "backend@iot": "backend-secret-2"}
USER_PROPERTY = symbol("x-enmesh-sasl-user")
MECH_PROPERTY = symbol("x-enmesh-sasl-mech")


@dataclass(frozen=True)
class ListenerSpec:
    port: int
    mechs: str
    cert: str | None = None  # TLS if set
    key: str | None = None


class _SaslServer(MessagingHandler):
    """Server-side SASL with Cyrus, the way a router configures it.

    Per accepted connection (on_connection_bound, before any byte is read):
    `transport.sasl()`, then `config_path(<dir with qdrouterd.conf>)`,
    `config_name("qdrouterd")`, `allowed_mechs(<listener's mechanisms>)`,
    `allow_insecure_mechs = False`. After authentication `transport.user` is the
    authenticated identity; it is echoed to the client in the open frame's properties.
    """

    def __init__(self, conf_dir: str, listeners: list[ListenerSpec], lifetime: float) -> None:
        super().__init__()
        self.conf_dir = conf_dir
        self.listeners = listeners
        self.lifetime = lifetime
        self.mechs: dict[int, str] = {}

    def on_start(self, event: Any) -> None:
        for spec in self.listeners:
            domain = None
            if spec.cert and spec.key:
                domain = SSLDomain(SSLDomain.MODE_SERVER)
                domain.set_credentials(spec.cert, spec.key, None)
                domain.set_peer_authentication(SSLDomain.ANONYMOUS_PEER)
            scheme = "amqps" if spec.cert else "amqp"
            acceptor = event.container.listen(f"{scheme}://{HOST}:{spec.port}", ssl_domain=domain)
            self.mechs[id(acceptor)] = spec.mechs
        event.container.schedule(self.lifetime, self)

    def on_timer_task(self, event: Any) -> None:
        event.container.stop()

    def on_connection_bound(self, event: Any) -> None:
        acceptor = getattr(event.connection, "_acceptor", None)
        if acceptor is None:
            return
        sasl = event.transport.sasl()
        sasl.config_path(self.conf_dir)
        sasl.config_name("qdrouterd")
        sasl.allowed_mechs(self.mechs[id(acceptor)])
        sasl.allow_insecure_mechs = False

    def on_connection_opening(self, event: Any) -> None:
        transport = event.transport
        event.connection.properties = {
            USER_PROPERTY: transport.user or "",
            MECH_PROPERTY: transport.sasl().mech or "",
        }


def _sasl_server_main(conf_dir: str, listeners: list[ListenerSpec], lifetime: float) -> None:
    Container(_SaslServer(conf_dir, listeners, lifetime)).run()


@dataclass(frozen=True)
class SaslEnv:
    plain_port: int  # SCRAM-SHA-256 only, no TLS (the compiled `amqp` listener)
    tls_port: int  # SCRAM-SHA-256 PLAIN over TLS (the compiled `amqps` listener)
    ip_only_port: int  # TLS with a certificate lacking DNS:127.0.0.1
    ca: Path


@pytest.fixture(scope="module")
def sasl_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslEnv]:
    assert SASL.extended(), "python-qpid-proton must be built with Cyrus SASL"
    base = tmp_path_factory.mktemp("sasl")
    db = base / "auth" / "enmesh.sasldb"
    make_sasldb(db, SASL_USERS)
    write_sasl_config(base / "sasl2", db, "SCRAM-SHA-256 PLAIN")
    pki = make_pki(base / "tls", ["router-0-client"])
    ip_only = make_pki(base / "tls-ip-only", ["router-0-client"], ip_as_dns=False)
    ports = [free_port() for _ in range(3)]
    cert, key = str(pki.cert("router-0-client")), str(pki.key("router-0-client"))
    listeners = [
        ListenerSpec(ports[0], "SCRAM-SHA-256"),
        ListenerSpec(ports[1], "SCRAM-SHA-256 PLAIN", cert, key),
        ListenerSpec(
            ports[2],
            "SCRAM-SHA-256 PLAIN",
            str(ip_only.cert("router-0-client")),
            str(ip_only.key("router-0-client")),
        ),
    ]
    ctx = multiprocessing.get_context("spawn")
    proc = ctx.Process(
        target=_sasl_server_main, args=(str(base / "sasl2"), listeners, 600.0), daemon=True
    )
    proc.start()
    try:
        deadline = time.monotonic() + 30
        while not all(port_is_listening(p) for p in ports):
            assert proc.is_alive(), f"SASL server exited with {proc.exitcode}"
            assert time.monotonic() < deadline, "SASL server did not listen within 30 s"
            time.sleep(0.05)
        yield SaslEnv(ports[0], ports[1], ports[2], pki.ca_cert)
    finally:
        proc.terminate()
        proc.join(10)
        if proc.is_alive():
            proc.kill()
            proc.join(10)


@dataclass(frozen=True)
class Login:
    ok: bool
    user: str = ""
    mech: str = ""
    error: str = ""


def _login(
    port: int,
    identity: str,
    password: str,
    mechs: str,
    *,
    ca: Path | None = None,
    allow_insecure: bool = False,
) -> Login:
    scheme = "amqps" if ca else "amqp"
    extra: dict[str, Any] = {"sni": HOST} if ca else {}
    try:
        conn = BlockingConnection(
            f"{scheme}://{HOST}:{port}",
            timeout=10,
            ssl_domain=client_ssl_domain(ca) if ca else None,
            user=identity,
            password=password,
            allowed_mechs=mechs,
            allow_insecure_mechs=allow_insecure,
            virtual_host="iot",
            **extra,
        )
    except ProtonException as err:
        return Login(ok=False, error=str(err))
    try:
        assert conn.conn is not None
        props = conn.conn.remote_properties or {}
        user, mech = props.get(USER_PROPERTY), props.get(MECH_PROPERTY)
        return Login(ok=True, user=str(user), mech=str(mech))
    finally:
        conn.close()


def test_proton_sasl_is_extended() -> None:
    assert SASL.extended()


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "PLAIN"])
def test_sasl_login_over_tls(sasl_env: SaslEnv, mech: str) -> None:
    good = _login(sasl_env.tls_port, "device@iot", SASL_USERS["device@iot"], mech, ca=sasl_env.ca)
    # The client sends the whole identity; the server reports the whole identity.
    assert good == Login(ok=True, user="device@iot", mech=mech)
    bad = _login(sasl_env.tls_port, "device@iot", "wrong-password", mech, ca=sasl_env.ca)
    assert not bad.ok
    assert "amqp:unauthorized-access" in bad.error
    assert "wrong-password" not in bad.error
    # Without the realm Cyrus looks the user up in the host-name realm: not found.
    bare = _login(sasl_env.tls_port, "device", SASL_USERS["device@iot"], mech, ca=sasl_env.ca)
    assert not bare.ok
    assert "amqp:unauthorized-access" in bare.error
    # Another user of the same realm is a different entry.
    other = _login(sasl_env.tls_port, "backend@iot", SASL_USERS["device@iot"], mech, ca=sasl_env.ca)
    assert not other.ok


def test_sasl_scram_without_tls(sasl_env: SaslEnv) -> None:
    good = _login(sasl_env.plain_port, "device@iot", SASL_USERS["device@iot"], "SCRAM-SHA-256")
    assert good == Login(ok=True, user="device@iot", mech="SCRAM-SHA-256")
    bad = _login(sasl_env.plain_port, "device@iot", "nope", "SCRAM-SHA-256")
    assert not bad.ok
    assert "amqp:unauthorized-access" in bad.error


def test_sasl_plain_refused_without_tls(sasl_env: SaslEnv) -> None:
    # The listener offers only SCRAM-SHA-256; and even a client willing to send PLAIN in
    # clear cannot: the server does not allow insecure mechanisms.
    login = _login(
        sasl_env.plain_port, "device@iot", SASL_USERS["device@iot"], "PLAIN", allow_insecure=True
    )
    assert not login.ok
    assert "amqp:unauthorized-access" in login.error


def test_proton_peer_name_check_needs_dns_san_for_ip(sasl_env: SaslEnv) -> None:
    """Why make_pki(ip_as_dns=True): proton checks `127.0.0.1` against DNS SANs only."""
    password = SASL_USERS["device@iot"]
    login = _login(sasl_env.ip_only_port, "device@iot", password, "PLAIN", ca=sasl_env.ca)
    assert not login.ok
    assert "certificate verify failed" in login.error
    login = _login(sasl_env.tls_port, "device@iot", password, "PLAIN", ca=sasl_env.ca)
    assert login.ok


# ---------------------------------------------------------------------------------------
# RabbitMQ: helpers

EVENTS = "/amq/queue/iot.events"
COMMANDS = "/amq/queue/iot.commands"
DLQ = "/amq/queue/iot.dlq"
AUDIT = "/amq/queue/iot.audit"
ALERTS_IN = "/exchange/iot.alerts/#"
ALERTS_OUT = "/exchange/iot.alerts"


class _closing:  # noqa: N801 - reads like contextlib.closing
    """Close a BlockingConnection on exit (it has no context manager protocol)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def __enter__(self) -> Any:
        return self.conn

    def __exit__(self, *exc: object) -> None:
        self.conn.close()


def _unique(tag: str) -> str:
    return f"{tag}-{uuid.uuid4().hex[:12]}"


def _rx(conn: Any, address: str, credit: int = 1) -> Any:
    """A receiver with a unique link name (proton's default name is container-id +
    address, and a second link with the same name is refused: `link name already
    attached`). Links are never closed one by one (see RabbitMQBroker.connect)."""
    return conn.create_receiver(address, credit=credit, name=_unique("rx"))


def _tx(conn: Any, address: str) -> Any:
    return conn.create_sender(address, name=_unique("tx"))


def _drain(broker: RabbitMQBroker, address: str, wait: float = 0.3) -> list[Any]:
    """Accept and return every message in `address`, on a connection of its own (closing
    it returns anything prefetched but not taken)."""
    with _closing(broker.connect()) as conn:
        receiver = _rx(conn, address, credit=100)
        bodies: list[Any] = []
        while (message := _receive(receiver, timeout=wait)) is not None:
            bodies.append(message.body)
            receiver.accept()
        return bodies


def _receive(receiver: Any, timeout: float = 5.0) -> Any | None:
    try:
        return receiver.receive(timeout=timeout)
    except Timeout:
        return None


@pytest.fixture
def broker_conn(rabbitmq_broker: RabbitMQBroker) -> Iterator[Any]:
    conn = rabbitmq_broker.connect()
    try:
        yield conn
    finally:
        conn.close()


def _poll(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.2)


# ---------------------------------------------------------------------------------------
# RabbitMQ: the broker itself


def _ephemeral_ports() -> range:
    low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    return range(int(low), int(high) + 1)


@pytest.mark.slow
def test_broker_listens_on_loopback_only(rabbitmq_broker: RabbitMQBroker) -> None:
    broker = rabbitmq_broker
    pids = set(node_processes(broker.node))
    assert broker._epmd is not None
    epmd_pid = broker._epmd.pid
    pids.add(epmd_pid)
    out = subprocess.run(
        ["ss", "-H", "-ltnup"], capture_output=True, text=True, check=True, timeout=10
    ).stdout
    seen: list[tuple[int, str, str]] = []
    for line in out.splitlines():
        fields = line.split()
        for pid in map(int, re.findall(r"pid=(\d+)", line)):
            if pid in pids:
                seen.append((pid, fields[0], fields[4]))
    tcp = {address for _, proto, address in seen if proto == "tcp"}
    assert f"{HOST}:{broker.tls_port}" in tcp
    assert f"{HOST}:{broker.ports.dist}" in tcp
    ephemeral = _ephemeral_ports()
    for pid, proto, address in seen:
        port = int(address.rsplit(":", 1)[1])
        allowed = (
            address.startswith(f"{HOST}:")
            # epmd always adds the loopback of both families; ::1 is loopback too.
            or (pid == epmd_pid and proto == "tcp" and address == f"[::1]:{port}")
            # RabbitMQ's bundled syslog client opens an unconnected UDP socket on an
            # ephemeral port while the node boots, to *send* log lines; it serves nothing
            # and closes a few seconds later. Any fixed or TCP port still fails.
            or (pid != epmd_pid and proto == "udp" and port in ephemeral)
        )
        assert allowed, f"pid {pid} listens on {proto} {address}"


@pytest.mark.slow
def test_broker_users(rabbitmq_broker: RabbitMQBroker) -> None:
    users = rabbitmq_broker.ctl("list_users", "--no-table-headers").stdout.split()
    assert users == [ROUTER_USER, "[]"]  # no guest, no tags
    perms = rabbitmq_broker.ctl("list_permissions", "-p", "enmesh", "--no-table-headers")
    assert perms.stdout.split() == [ROUTER_USER, r"^amq\.gen-.*", ".*", ".*"]
    with pytest.raises(ProtonException, match=r"unauthorized-access|authentication failed"):
        rabbitmq_broker.connect(password="not-the-password").close()
    with pytest.raises(ProtonException):
        rabbitmq_broker.connect(user="", password="", mechs="ANONYMOUS").close()


@pytest.mark.slow
def test_broker_vhost_selection(rabbitmq_broker: RabbitMQBroker) -> None:
    # Explicit: the open hostname `vhost:enmesh`.
    rabbitmq_broker.connect(virtual_host="vhost:enmesh").close()
    # What a qdrouterd-style connector sends (its host): amqp1_0.default_vhost = enmesh.
    rabbitmq_broker.connect(virtual_host=None).close()
    # `vhost:` names the vhost; an unknown one is refused.
    with pytest.raises(ProtonException, match="unauthorized-access"):
        conn = rabbitmq_broker.connect(virtual_host="vhost:nope")
        _tx(conn, EVENTS)


# ---------------------------------------------------------------------------------------
# RabbitMQ: what the compiled definitions and router configs assume


@pytest.mark.slow
def test_a_send_and_receive_quorum_queue(rabbitmq_broker: RabbitMQBroker, broker_conn: Any) -> None:
    _drain(rabbitmq_broker, EVENTS)
    body = _unique("a")
    _tx(broker_conn, EVENTS).send(Message(body=body, durable=True))
    receiver = _rx(broker_conn, EVENTS)
    message = _receive(receiver)
    assert message is not None and message.body == body
    receiver.accept()


@pytest.mark.slow
def test_b_commands_ttl(rabbitmq_broker: RabbitMQBroker, broker_conn: Any) -> None:
    rows = {r["name"]: r for r in rabbitmq_broker.list_queues("name", "type", "arguments")}
    args = parse_queue_arguments(rows["iot.commands"]["arguments"])
    assert rows["iot.commands"]["type"] == "quorum"
    assert args["x-message-ttl"] == "60000"
    assert args["x-dead-letter-routing-key"] == "iot.dlq"
    # A shorter per-message TTL wins; the expired message is dead-lettered to iot.dlq.
    _drain(rabbitmq_broker, COMMANDS)
    _drain(rabbitmq_broker, DLQ)
    body = _unique("b")
    _tx(broker_conn, COMMANDS).send(Message(body=body, durable=True, ttl=0.2))
    dlq = _rx(broker_conn, DLQ)
    message = _receive(dlq, timeout=15)
    assert message is not None and message.body == body
    dlq.accept()
    assert _drain(rabbitmq_broker, COMMANDS) == []


@pytest.mark.slow
def test_c_delivery_limit_then_dead_letter(
    rabbitmq_broker: RabbitMQBroker, broker_conn: Any
) -> None:
    _drain(rabbitmq_broker, EVENTS)
    _drain(rabbitmq_broker, DLQ)
    body = _unique("c")
    _tx(broker_conn, EVENTS).send(Message(body=body, durable=True))
    receiver = _rx(broker_conn, EVENTS)
    deliveries = 0
    while (message := _receive(receiver, timeout=3)) is not None:
        assert message.body == body
        deliveries += 1
        receiver.release(delivered=False)  # outcome `released`: requeue
        assert deliveries <= 10, "delivery limit not enforced"
    # x-delivery-limit 5: delivered 6 times, then dead-lettered.
    assert deliveries == 6
    assert _drain(rabbitmq_broker, DLQ) == [body]


@pytest.mark.slow
def test_c_modified_outcome_is_refused_by_rabbitmq_310(
    rabbitmq_broker: RabbitMQBroker,
) -> None:
    """RabbitMQ 3.10 does not know the `modified` outcome: it ends the session with
    amqp:invalid-field ("Unrecognised state: {'v1_0.modified',true,false,undefined}")
    and requeues the message. A router must map `modified` to `released` towards it."""
    _drain(rabbitmq_broker, EVENTS)
    body = _unique("c-modified")
    conn = rabbitmq_broker.connect()
    try:
        _tx(conn, EVENTS).send(Message(body=body, durable=True))
        receiver = _rx(conn, EVENTS)
        message = _receive(receiver)
        assert message is not None and message.body == body
        delivery = receiver.fetcher.unsettled.popleft()
        delivery.local.failed = True
        delivery.update(Delivery.MODIFIED)
        delivery.settle()
        session = receiver.link.session
        conn.wait(lambda: bool(session.state & Endpoint.REMOTE_CLOSED), timeout=10)
        assert session.remote_condition is not None
        assert session.remote_condition.name == "amqp:invalid-field"
        assert "modified" in session.remote_condition.description
    finally:
        conn.close()
    assert _drain(rabbitmq_broker, EVENTS) == [body]


@pytest.mark.slow
def test_d_topic_and_subscription(rabbitmq_broker: RabbitMQBroker) -> None:
    _drain(rabbitmq_broker, AUDIT)
    conn = rabbitmq_broker.connect()
    try:
        subscriber = _rx(conn, ALERTS_IN)
        body = _unique("d")
        _tx(conn, ALERTS_OUT).send(Message(body=body, subject="x", durable=True))
        message = _receive(subscriber)
        assert message is not None and message.body == body and message.subject == "x"
        subscriber.accept()
        audit = _rx(conn, AUDIT)
        message = _receive(audit)
        assert message is not None and message.body == body
        audit.accept()
    finally:
        conn.close()


@pytest.mark.slow
def test_d_topic_receiver_leaves_its_queue_behind(
    rabbitmq_broker: RabbitMQBroker,
) -> None:
    """`/exchange/X/#` sources get a server-named classic queue that is neither
    exclusive nor auto-delete and outlives the link and the connection (RabbitMQ
    issue #2588), collecting every later message. A policy `expires` on `^amq\\.gen-`
    removes such queues once unused."""
    broker = rabbitmq_broker

    def temp_queues() -> list[dict[str, str]]:
        rows = broker.list_queues("name", "policy", "auto_delete", "exclusive")
        return [r for r in rows if r["name"].startswith("amq.gen-")]

    before = {r["name"] for r in temp_queues()}
    conn = broker.connect()
    _rx(conn, ALERTS_IN)
    conn.close()
    leaked = [r for r in temp_queues() if r["name"] not in before]
    assert len(leaked) == 1
    if not leaked[0]["policy"]:
        assert leaked[0]["auto_delete"] == "false"
    broker.ctl(
        "set_policy", "-p", "enmesh", "--apply-to", "queues", "--priority", "100",
        "enmesh-selftest-temp-queues", r"^amq\.gen-", json.dumps({"expires": 1000}),
    )  # fmt: skip
    try:
        _poll(lambda: not temp_queues(), 20, "amq.gen- queues to expire")
    finally:
        broker.ctl("clear_policy", "-p", "enmesh", "enmesh-selftest-temp-queues")


@pytest.mark.slow
def test_f_policies_accepted(
    rabbitmq_broker: RabbitMQBroker,
    rendered_local_stack: Path,
) -> None:
    definitions = json.loads(
        (rendered_local_stack / "brokers" / "broker-0.definitions.json").read_text()
    )
    out = rabbitmq_broker.ctl("list_policies", "-p", "enmesh", "--no-table-headers").stdout
    listed = {}
    for line in out.splitlines():
        vhost, name, pattern, apply_to, definition, priority = line.split("\t")
        listed[name] = (vhost, pattern, apply_to, json.loads(definition), int(priority))
    expected = {
        p["name"]: (p["vhost"], p["pattern"], p["apply-to"], p["definition"], p["priority"])
        for p in definitions["policies"]
    }
    assert listed == expected
    applied = {r["name"]: r["policy"] for r in rabbitmq_broker.list_queues("name", "policy")}
    for queue in definitions["queues"]:
        assert applied[queue["name"]] == f"{queue['name'].split('.')[0]}-queues"


@pytest.mark.slow
def test_e_message_survives_restart(rabbitmq_broker: RabbitMQBroker) -> None:
    broker = rabbitmq_broker
    body = _unique("e")
    _drain(broker, EVENTS)
    with _closing(broker.connect()) as conn:
        _tx(conn, EVENTS).send(Message(body=body, durable=True))
    old_pid = broker._server.pid if broker._server else None
    broker.restart()
    assert broker._server is not None and broker._server.pid != old_pid
    assert {r["name"] for r in broker.list_queues("name")} >= {"iot.events", "iot.dlq"}
    assert _drain(broker, EVENTS) == [body]


# ---------------------------------------------------------------------------------------
# RabbitMQ: lifecycle of a second broker


@pytest.mark.slow
def test_broker_without_default_vhost_and_clean_stop(
    tmp_path: Path,
    rendered_local_stack: Path,
) -> None:
    definitions = rendered_local_stack / "brokers" / "broker-0.definitions.json"
    with start_broker(tmp_path / "rmq", definitions, default_vhost=None) as broker:
        node, epmd_port, tls_port = broker.node, broker.ports.epmd, broker.tls_port
        assert node_processes(node)
        broker.connect(virtual_host="vhost:enmesh").close()
        # Without amqp1_0.default_vhost the connector-style hostname lands in `/`.
        with pytest.raises(ProtonException, match="unauthorized-access"):
            conn = broker.connect(virtual_host=None)
            _tx(conn, EVENTS)
        assert broker.router_password not in broker.log_tail(10_000)
    assert node_processes(node) == []
    assert not port_is_listening(epmd_port)
    assert not port_is_listening(tls_port)
    pgrep = subprocess.run(["pgrep", "-f", node], capture_output=True, text=True, check=False)
    assert [int(p) for p in pgrep.stdout.split() if int(p) != os.getpid()] == []
