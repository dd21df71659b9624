"""Abuse from outside: password guessing, silent sockets, the descriptor limit, bad strings.

Each test runs its own router (the settings differ) built from a compiled stack.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import fuzz, probes
from tests.support.mesh import Mesh, RouterProcess, build_mesh, wait_until

USER, VHOST = "device@iot", "iot"
AMQP_OPEN = re.compile(rb"\x00\x53\x10")  # the router's open performative
CLOSE = probes.frame(probes.described(0x18, []))  # a client's close: the router answers, ends


@pytest.fixture
def make_router(tmp_path: Path) -> Iterator[object]:
    """Start a one-router stack with `security` settings (and a model, a wrapper)."""
    meshes: list[Mesh] = []

    def start(
        security: dict[str, object],
        model: str | None = None,
        wrapper: tuple[str, ...] = (),
    ) -> Mesh:
        models = None
        if model is not None:
            models = [tmp_path / "test.model.yml"]
            models[0].write_text(model)
        mesh = build_mesh(tmp_path / "mesh", routers=1, models=models, security=security)
        mesh.routers[0].wrapper = wrapper
        meshes.append(mesh)
        mesh.start()
        return mesh

    yield start
    for mesh in meshes:
        mesh.stop()


def _metric(router: RouterProcess, name: str, listener: str) -> float:
    match = re.search(rf'^{name}{{[^}}]*listener="{listener}"}} (\S+)$', router.metrics(), re.M)
    return float(match[1]) if match else -1.0


def _log(router: RouterProcess) -> str:
    return router.log.read_text(errors="replace")


def test_guesser_is_throttled_while_others_log_in(make_router) -> None:  # type: ignore[no-untyped-def]
    mesh = make_router({"loginThrottle": {"maxFailures": 3, "windowSeconds": 60}})
    router, password = mesh.routers[0], mesh.passwords[USER]
    wrong = "not-the-password-x7"
    guesses = [
        probes.login_from("127.0.0.1", router.amqp_port, USER, wrong, vhost=VHOST) for _ in range(3)
    ]
    assert guesses == ["amqp:unauthorized-access"] * 3
    # The 4th attempt from that source is refused even with the right password ...
    assert probes.login_from("127.0.0.1", router.amqp_port, USER, password, vhost=VHOST) != "open"
    # ... while the same user from another address gets in.
    assert probes.login_from("127.0.0.2", router.amqp_port, USER, password, vhost=VHOST) == "open"

    failures = [line for line in _log(router).splitlines() if "login failed" in line]
    assert len(failures) == 3
    assert all("127.0.0.1" in line and "SCRAM-SHA-256" in line for line in failures)
    assert wrong not in _log(router)
    assert _metric(router, "enmesh_router_auth_failures_total", "amqp") == 3
    assert _metric(router, "enmesh_router_auth_throttled_total", "amqp") >= 1


def test_silent_sockets_are_closed_after_the_handshake_timeout(make_router) -> None:  # type: ignore[no-untyped-def]
    limits = {"timeoutSeconds": 2, "maxPendingPerListener": 5000, "maxPendingPerSource": 5000}
    mesh = make_router({"handshake": limits})
    router = mesh.routers[0]
    silent = probes.hold_silent(router.amqp_port, 2000)
    try:
        # A real client connects normally while the silent ones wait.
        login = probes.login_from(
            "127.0.0.2", router.amqp_port, USER, mesh.passwords[USER], vhost=VHOST
        )
        assert login == "open"
        assert probes.count_closed(silent, timeout=30) == 2000
    finally:
        probes.close_all(silent)
    assert _metric(router, "enmesh_router_handshake_timeouts_total", "amqp") == 2000
    # One line per summary interval, not one per connection.
    assert _log(router).count("no AMQP open within") <= 5


def test_handshakes_in_progress_are_limited_per_source(make_router) -> None:  # type: ignore[no-untyped-def]
    mesh = make_router({"handshake": {"timeoutSeconds": 60, "maxPendingPerSource": 20}})
    router = mesh.routers[0]
    silent = probes.hold_silent(router.amqp_port, 30, source="127.0.0.3")
    try:
        assert probes.count_closed(silent, timeout=5) == 10  # the 21st to 30th
        login = probes.login_from(
            "127.0.0.2", router.amqp_port, USER, mesh.passwords[USER], vhost=VHOST
        )
        assert login == "open"
    finally:
        probes.close_all(silent)
    assert _metric(router, "enmesh_router_handshake_refused_total", "amqp") == 10


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_at_the_descriptor_limit_the_router_waits_instead_of_spinning(make_router) -> None:  # type: ignore[no-untyped-def]
    limits = {"timeoutSeconds": 60, "maxPendingPerListener": 5000, "maxPendingPerSource": 5000}
    mesh = make_router({"handshake": limits}, wrapper=("prlimit", "--nofile=96:96", "--"))
    router = mesh.routers[0]
    assert router.process is not None
    silent = probes.hold_silent(router.amqp_port, 150)  # more than the router may open
    try:
        wait_until(lambda: "Too many open files" in _log(router), 10, "the descriptor limit")
        before, started = _cpu_seconds(router.process.pid), time.monotonic()
        time.sleep(3)  # the measurement window, not a wait for readiness
        busy = (_cpu_seconds(router.process.pid) - before) / (time.monotonic() - started)
    finally:
        probes.close_all(silent)
    assert busy < 0.3, f"router used {busy:.0%} of a core at the descriptor limit"
    # The accept warning, not the connector's: a connector redialling its broker meanwhile
    # also meets the limit, and says so once per backoff step.
    assert _log(router).count("pausing accepts") <= 2
    # Descriptors free again: the router accepts and serves.
    assert (
        probes.login_from("127.0.0.2", router.amqp_port, USER, mesh.passwords[USER], vhost=VHOST)
        == "open"
    )


@pytest.mark.parametrize(
    ("stream", "field"),
    [
        (probes.anonymous_session(hostname=b"pub\xfflic"), "open frame's hostname"),
        (probes.anonymous_session(container=b"\xc3\x28"), "open frame's container-id"),
        (probes.anonymous_session(link=b"\xed\xa0\x80"), "attach frame's name"),
    ],
    ids=["hostname", "container-id", "link-name"],
)
def test_invalid_utf8_closes_that_connection_cleanly(  # type: ignore[no-untyped-def]
    make_router, stream: bytes, field: str
) -> None:
    mesh = make_router({}, model=probes.ANONYMOUS_MODEL)
    router = mesh.routers[0]
    answer = probes.exchange(router.amqp_port, stream)
    assert b"amqp:decode-error" in answer
    assert f"invalid UTF-8 in the {field}".encode() in answer
    log = _log(router)
    assert log.count(f"invalid UTF-8 in the {field}") == 1
    assert fuzz.tracebacks(router.log) == 0
    assert "handshakes_pending" in router.metrics()  # /metrics still answers


def test_short_fuzz_leaves_no_traceback_and_no_growth(make_router) -> None:  # type: ignore[no-untyped-def]
    mesh = make_router({"loginThrottle": {"maxFailures": 10**9}}, model=probes.ANONYMOUS_MODEL)
    router = mesh.routers[0]
    assert router.process is not None
    kinds = fuzz.SAFE_KINDS
    fuzz.run_fuzz(router.amqp_port, 3, seed=1, kinds=kinds)  # warm-up: allocator pools
    start_kb = fuzz.rss_kb(router.process.pid)
    stats = fuzz.run_fuzz(router.amqp_port, 20, seed=2, kinds=kinds)
    end_kb = fuzz.rss_kb(router.process.pid)
    assert stats.connections > 200
    assert fuzz.tracebacks(router.log) == 0
    assert router.process.poll() is None, router.log_tail()
    assert end_kb <= start_kb * 1.10, f"RSS {start_kb} -> {end_kb} kB"


def test_a_refused_attach_detached_in_the_same_write_does_not_kill_the_router(make_router) -> None:  # type: ignore[no-untyped-def]
    # The refusal closes the link while the peer's detach waits in the same batch of
    # events: both close events see it closed both ways (it was freed twice: SIGSEGV).
    mesh = make_router({"loginThrottle": {"maxFailures": 10**9}}, model=probes.ANONYMOUS_MODEL)
    router = mesh.routers[0]
    assert router.process is not None
    login = probes.anonymous_session(link=None) + probes.begin_frame()
    detach = probes.frame(probes.described(0x16, [probes.uint(0), probes.TRUE]))
    data = login + probes.attach_frame(b"link", b"x@y") + detach + CLOSE
    for _ in range(20):
        reply = probes.exchange(router.amqp_port, data)
        assert b"'@' is reserved in addresses" in reply
    assert router.process.poll() is None, router.log_tail()


def test_a_sasl_response_before_the_init_is_dropped_before_cyrus_sees_it(make_router) -> None:  # type: ignore[no-untyped-def]
    # proton passes it to Cyrus' sasl_server_step, which follows a NULL mechanism: SIGSEGV.
    mesh = make_router({"loginThrottle": {"maxFailures": 10**9}}, model=probes.ANONYMOUS_MODEL)
    router = mesh.routers[0]
    assert router.process is not None
    response = probes.frame(probes.described(0x43, [b"\xa0\x03abc"]), sasl=True)
    assert probes.exchange(router.amqp_port, probes.SASL_HEADER + response) == b""
    opened = probes.exchange(router.amqp_port, probes.anonymous_session() + CLOSE)
    assert AMQP_OPEN.search(opened), "the next client is served"
    assert "sasl-response before sasl-init" in router.log.read_text()
    assert router.process.poll() is None, router.log_tail()


def test_sasl_frames_out_of_order_inside_tls_do_not_kill_the_router(make_router) -> None:  # type: ignore[no-untyped-def]
    # The plaintext screen cannot read inside TLS: proton itself refuses them (our patch of
    # its sasl.c, scripts/patches/), ending only that connection.
    mesh = make_router({"loginThrottle": {"maxFailures": 10**9}}, model=probes.ANONYMOUS_MODEL)
    router = mesh.routers[0]
    assert router.process is not None
    response = probes.frame(probes.described(0x43, [b"\xa0\x03abc"]), sasl=True)
    init = probes.frame(probes.described(0x41, [probes.symbol("ANONYMOUS")]), sasl=True)
    for attack in (response, init + init):
        probes.exchange_tls(router.amqps_port, mesh.ca, probes.SASL_HEADER + attack)
        assert router.process.poll() is None, router.log_tail()
    opened = probes.exchange(router.amqp_port, probes.anonymous_session() + CLOSE)
    assert AMQP_OPEN.search(opened), "the next client is served"


def test_mutated_frames_do_not_kill_the_router(make_router) -> None:  # type: ignore[no-untyped-def]
    mesh = make_router({"loginThrottle": {"maxFailures": 10**9}}, model=probes.ANONYMOUS_MODEL)
    router = mesh.routers[0]
    assert router.process is not None
    with contextlib.suppress(ConnectionRefusedError):  # what a dead router answers
        fuzz.run_fuzz(router.amqp_port, 20, seed=5, kinds=("mutated", "performatives"))
    assert router.process.poll() is None, f"router exited with {router.process.returncode}"
    assert fuzz.tracebacks(router.log) == 0
    assert "enmesh_router_uptime_seconds" in router.metrics()  # still serving
