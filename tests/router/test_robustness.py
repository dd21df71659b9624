"""Hostile or broken peers lose their own connection; the router and everyone else carry on."""

from __future__ import annotations

import random
import selectors
import socket
import struct
import subprocess
import time
from pathlib import Path
from typing import Any

from proton import Message

from tests.router.conftest import account
from tests.support.amqp import Scenario, run
from tests.support.mesh import ROUTER_BIN, Mesh

AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
SASL_HEADER = b"AMQP\x03\x01\x00\x00"


def _garbage(rng: random.Random, kind: int) -> bytes:
    """Five flavours of broken input, chosen by `kind`."""
    if kind == 0:  # random bytes from the first byte
        return rng.randbytes(rng.randint(1, 4096))
    if kind == 1:  # a valid header, then noise
        return SASL_HEADER + rng.randbytes(rng.randint(1, 512))
    if kind == 2:  # a frame header promising more than arrives (truncated frame)
        return SASL_HEADER + struct.pack(">IBBH", 4096, 2, 1, 0) + rng.randbytes(16)
    if kind == 3:  # an oversized frame size
        return SASL_HEADER + struct.pack(">IBBH", 0x7FFFFFFF, 2, 1, 0)
    return AMQP_HEADER + struct.pack(">IBBH", 8, 2, 0, 0)  # AMQP without SASL: refused


def _drain_until_closed(sockets: list[socket.socket], deadline_seconds: float) -> int:
    """Read all sockets at once until the router hangs up on them; count those it closed.

    A truncated frame leaves the router waiting for more bytes: those connections end
    only at the idle timeout, after this deadline.
    """
    selector = selectors.DefaultSelector()
    for sock in sockets:
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
    closed = 0
    deadline = time.monotonic() + deadline_seconds
    while selector.get_map() and time.monotonic() < deadline:
        for key, _ in selector.select(timeout=0.2):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            try:
                if sock.recv(4096):
                    continue
            except BlockingIOError:
                continue
            except ConnectionResetError:
                pass
            closed += 1
            selector.unregister(sock)
    for sock in sockets:
        sock.close()
    return closed


def test_fifty_garbage_connections_do_not_hurt_the_router(full_mesh: Mesh) -> None:
    rng = random.Random(20261121)
    port = full_mesh.routers[0].amqp_port
    sockets = []
    for i in range(50):
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        sock.sendall(_garbage(rng, i % 5))
        sockets.append(sock)
    closed_by_router = _drain_until_closed(sockets, deadline_seconds=5)
    assert closed_by_router >= 40
    router = full_mesh.routers[0]
    assert router.process is not None and router.process.poll() is None
    # ... and it still serves real clients.
    assert run(RoundTrip(full_mesh), timeout=30).received == ["still here"]


class RoundTrip(Scenario):
    def __init__(self, mesh: Mesh) -> None:
        super().__init__()
        self.mesh = mesh
        self.received: list[Any] = []

    def on_start(self, event: Any) -> None:
        conn = self.open(account(self.mesh, 0, "backend@iot"))
        event.container.create_receiver(conn, "telemetry", name="r")

    def on_link_opened(self, event: Any) -> None:
        if event.link.name == "r":
            conn = self.open(account(self.mesh, 0, "device@iot"))
            event.container.create_sender(conn, "telemetry", name="s")

    def on_sendable(self, event: Any) -> None:
        if not self.received and event.sender.credit and not getattr(self, "sent", False):
            self.sent = True
            event.sender.send(Message(body="still here"))

    def on_message(self, event: Any) -> None:
        self.received.append(event.message.body)
        self.done()


def test_bad_config_stops_start_up_with_file_and_line(tmp_path: Path) -> None:
    conf = tmp_path / "router.conf"
    conf.write_text("router {\n    id: r0\n}\n\nlistener {\n    port: 5672\n    prot: 1\n}\n")
    result = subprocess.run(
        [str(ROUTER_BIN), "--config", str(conf)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 1
    assert f"{conf}:7: " in result.stderr and "unknown attribute 'prot'" in result.stderr
    assert "Traceback" not in result.stderr
