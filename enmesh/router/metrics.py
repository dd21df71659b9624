"""Prometheus metrics over HTTP on the metrics listener, served from the router's loop.

A request gets one response and the connection is closed (HTTP/1.0 style); the
exposition is small, so this stays a few lines instead of a web framework.
"""

from __future__ import annotations

import selectors
import socket
import time
from typing import TYPE_CHECKING

from enmesh.router import inventory, streaming, tally
from enmesh.router.engine import Acceptor, Loop

if TYPE_CHECKING:
    from enmesh.router.router import Router

MAX_REQUEST = 8192
_ADMISSION_COUNTERS = (
    ("auth_failures", "enmesh_router_auth_failures_total", "Failed SASL logins."),
    (
        "auth_throttled",
        "enmesh_router_auth_throttled_total",
        "Connections refused because their source is in a login cool-down.",
    ),
    (
        "handshake_timeouts",
        "enmesh_router_handshake_timeouts_total",
        "Connections closed for not sending their AMQP open in time.",
    ),
    (
        "handshake_refused",
        "enmesh_router_handshake_refused_total",
        "Connections refused because too many handshakes were in progress.",
    ),
)


# Management's router.address attributes, one series each (the same numbers QUERY gives).
_ADDRESS_SERIES = (
    (
        "deliveriesIngress",
        "enmesh_address_deliveries_ingress_total",
        "Deliveries received from clients and brokers (qdrouterd's deliveriesIngress).",
    ),
    (
        "deliveriesEgress",
        "enmesh_address_deliveries_egress_total",
        "Deliveries sent to clients and brokers (qdrouterd's deliveriesEgress).",
    ),
    (
        "deliveriesTransit",
        "enmesh_address_deliveries_transit_total",
        "Deliveries sent on to other routers.",
    ),
    (
        "deliveriesToContainer",
        "enmesh_address_deliveries_to_container_total",
        "Deliveries sent to brokers.",
    ),
    (
        "deliveriesFromContainer",
        "enmesh_address_deliveries_from_container_total",
        "Deliveries received from brokers.",
    ),
    ("subscriberCount", "enmesh_address_local_consumers", "Local consumers."),
    (
        "droppedPresettledDeliveries",
        "enmesh_address_dropped_presettled_total",
        "Presettled copies dropped because a consumer fell too far behind.",
    ),
    ("undeliveredCount", "enmesh_address_undelivered", "Messages waiting for credit."),
)
_ROUTER_COUNTERS = tuple(
    (field, f"enmesh_router_{snake}_total", help_text)
    for field, snake, help_text in (
        ("deliveriesIngress", "deliveries_ingress", "Deliveries from clients and brokers."),
        ("deliveriesEgress", "deliveries_egress", "Deliveries to clients and brokers."),
        ("deliveriesTransit", "deliveries_transit", "Deliveries sent on to other routers."),
        ("acceptedDeliveries", "deliveries_accepted", "Sent deliveries accepted."),
        ("rejectedDeliveries", "deliveries_rejected", "Sent deliveries rejected."),
        ("releasedDeliveries", "deliveries_released", "Sent deliveries released."),
        ("modifiedDeliveries", "deliveries_modified", "Sent deliveries modified."),
        ("presettledDeliveries", "deliveries_presettled", "Deliveries sent presettled."),
        (
            "droppedPresettledDeliveries",
            "deliveries_dropped_presettled",
            "Presettled deliveries dropped for a slow consumer.",
        ),
    )
)


def _label(value: object) -> str:
    """A Prometheus label value: backslash, quote and newline escaped."""
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return text.replace("\n", "\\n")


def exposition(router: Router) -> str:
    """The metrics in Prometheus text format."""
    lines: list[str] = []

    def metric(name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        lines.extend(f"{name}{labels} {value}" for labels, value in samples)

    rid = f'router="{_label(router.id)}"'
    metric(
        "enmesh_router_uptime_seconds",
        "gauge",
        "Seconds since the router started.",
        [(f"{{{rid}}}", int(time.time() - router.started_at))],
    )
    metric(
        "enmesh_router_reachable_routers",
        "gauge",
        "Other routers reachable in the mesh.",
        [(f"{{{rid}}}", len(router.mesh.reachable()))],
    )
    roles: dict[str, int] = {}
    for conn in inventory.connection_entities(router):
        roles[conn["role"]] = roles.get(conn["role"], 0) + 1
    metric(
        "enmesh_router_connections",
        "gauge",
        "Open connections by role.",
        [(f'{{{rid},role="{role}"}}', count) for role, count in sorted(roles.items())],
    )
    admission = router.admission
    for counter, name, help_text in _ADMISSION_COUNTERS:
        metric(
            name,
            "counter",
            help_text,
            [
                (f'{{{rid},listener="{_label(listener)}"}}', admission.counts[counter, listener])
                for listener in admission.listeners
            ],
        )
    metric(
        "enmesh_router_handshakes_pending",
        "gauge",
        "Connections accepted that have not sent their AMQP open yet.",
        [
            (f'{{{rid},listener="{_label(listener)}"}}', admission.pending(listener))
            for listener in admission.listeners
        ],
    )
    metric(
        "enmesh_router_login_blocked_sources",
        "gauge",
        "Source addresses refused by the login throttle right now.",
        [(f"{{{rid}}}", admission.blocked_sources())],
    )
    metric(
        "enmesh_router_accept_pauses_total",
        "counter",
        "Times accepting stopped for a moment at the descriptor (or memory) limit.",
        [(f"{{{rid}}}", sum(acceptor.pauses for acceptor in router.acceptors))],
    )
    metric(
        "enmesh_router_stream_buffered_bytes",
        "gauge",
        "Bytes of large messages in progress the router holds (Q2 bounds each one).",
        [(f"{{{rid}}}", streaming.buffered_bytes())],
    )
    wills = router.wills
    metric(
        "enmesh_router_wills",
        "gauge",
        "Clients' wills ($lwt): registered on open links, and published but not yet taken.",
        [
            (f'{{{rid},state="registered"}}', wills.registered),
            (f'{{{rid},state="publishing"}}', len(wills.pending)),
        ],
    )
    metric(
        "enmesh_router_wills_total",
        "counter",
        "Clients' wills published (taken by a consumer) and dropped (rejected, untaken).",
        [
            (f'{{{rid},result="published"}}', wills.published),
            (f'{{{rid},result="dropped"}}', wills.dropped),
        ],
    )
    entity = inventory.router_entity(router)
    for field, name, help_text in _ROUTER_COUNTERS:
        metric(name, "counter", help_text, [(f"{{{rid}}}", entity[field])])
    addresses = list(inventory.address_rows(router))
    labels = {key: f"{rid},{_address_labels(key)}" for key, _ in addresses}
    metric(
        "enmesh_address_deliveries_total",
        "counter",
        "Deliveries in (from clients, routers, brokers) and out (to them), per address.",
        [
            (
                f'{{{labels[key]},direction="{direction}",peer="{peer}"}}',
                state.counts[slot] if state is not None else 0,
            )
            for key, _, state in inventory.known_addresses(router)
            for slot, direction, peer in tally.LABELS
        ],
    )
    for field, name, help_text in _ADDRESS_SERIES:
        kind = "counter" if name.endswith("_total") else "gauge"
        metric(name, kind, help_text, [(f"{{{labels[key]}}}", a[field]) for key, a in addresses])
    reloader = router.reloader
    if reloader is not None:  # config reloads (enmesh.router.reload): what `apply` waits for
        metric(
            "enmesh_router_config_reloads_total",
            "counter",
            "Config reloads (SIGHUP) by outcome.",
            [(f'{{{rid},result="{r}"}}', n) for r, n in sorted(reloader.results.items())],
        )
        digests = f'sha256="{reloader.sha256}",policy_sha256="{reloader.policy_sha256}"'
        metric(
            "enmesh_router_config_info",
            "gauge",
            "The config file (and policy files) the router runs, by sha256.",
            [(f"{{{rid},{digests}}}", 1)],
        )
    return "\n".join(lines) + "\n"


def _address_labels(key: str) -> str:
    """`address` without the waypoint phase mark, and `phase` (0 unless a waypoint's 1),
    as qdrouterd's mobile addresses M0/M1."""
    address, mark, phase = key.rpartition("@")
    if not mark or not phase.isdigit():
        address, phase = key, "0"
    return f'address="{_label(address)}",phase="{phase}"'


class _Exchange:
    def __init__(self, loop: Loop, router: Router, sock: socket.socket) -> None:
        self.loop, self.router, self.sock = loop, router, sock
        self.request = b""
        self.response = b""
        sock.setblocking(False)
        loop.register(sock, self, selectors.EVENT_READ)

    def on_readable(self) -> None:
        try:
            chunk = self.sock.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            self._close()
            return
        self.request += chunk
        if not chunk or len(self.request) > MAX_REQUEST:
            self._close()
        elif b"\r\n\r\n" in self.request or b"\n\n" in self.request:
            self._respond()

    def _respond(self) -> None:
        line = self.request.split(b"\r\n", 1)[0].decode("latin-1")
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "GET" and parts[1].split("?")[0] == "/metrics":
            body, status = exposition(self.router).encode(), "200 OK"
            kind = "text/plain; version=0.0.4"
        else:
            body, status, kind = b"not found; try /metrics\n", "404 Not Found", "text/plain"
        self.response = (
            f"HTTP/1.0 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n"
        ).encode() + body
        self.loop.modify(self.sock, self, selectors.EVENT_WRITE)

    def on_writable(self) -> None:
        try:
            sent = self.sock.send(self.response)
        except BlockingIOError:
            return
        except OSError:
            self._close()
            return
        self.response = self.response[sent:]
        if not self.response:
            self._close()

    def _close(self) -> None:
        self.loop.unregister(self.sock)
        self.sock.close()


class MetricsServer:
    def __init__(self, loop: Loop, router: Router, host: str, port: int) -> None:
        self.loop, self.router = loop, router
        self.acceptor = Acceptor(loop, host, port, self._accept)

    def _accept(self, sock: socket.socket, _peer: str) -> None:
        _Exchange(self.loop, self.router, sock)
