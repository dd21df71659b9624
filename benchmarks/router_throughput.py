"""Router benchmark: throughput, latency, memory and connection scale, in one run.

    .venv/bin/python benchmarks/router_throughput.py [--messages N] [--connections N]
        [--pairs N] [--reference-router PATH [--runs N] [--paced-rate R]]

Paths measured with the same lean proton clients, the sender and the receiver each in
a process of its own (the routers and RabbitMQ are processes too; all share 2 cores),
100-byte bodies:
  (a) proton sender -> proton receiver, no router; and `--pairs` such pairs at once, the
      clients' ceiling (one pair is bound by its own two processes)
  (b) through 1 router            (c) across 3 routers (chain, 2 inter-router hops)
  (d) through RabbitMQ's AMQP 1.0 queue (TLS: the broker listens only on TLS)
each unsettled (receiver accepts, sender waits for outcomes) and presettled; then p50/p99
latency at half of (b)'s and (c)'s peak rate; then router memory per idle connection
and per address, and whether 1,000 concurrent connections are held. Prints the figures
and writes them to benchmarks/results/router_throughput.json. The router's own profile
of run (b) is summarised at the end (ENMESH_ROUTER_PROFILE). With `--reference-router
PATH` (a qdrouterd binary), the same compiled configs then run under enmesh-router and
under PATH in turn, `--runs` rounds (benchmarks/router_reference.py), and the JSON holds
both engines' figures and their ratios under `side_by_side`.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from proton import Message
from proton.handlers import MessagingHandler
from proton.reactor import Container

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.router_reference import side_by_side  # noqa: E402
from tests.support.amqp import Account  # noqa: E402
from tests.support.connection_hold import (  # noqa: E402
    HeldConnections,
    held_figures,
    raise_open_files_limit,
)
from tests.support.fuzz import rss_kb  # noqa: E402
from tests.support.mesh import Mesh, build_mesh, wait_until  # noqa: E402
from tests.support.ports import free_port, port_is_listening  # noqa: E402
from tests.support.rabbitmq import RabbitMQBroker, allocate_ports  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "router_throughput.json"
BODY = b"x" * 100
CREDIT = 500
PACE_SECONDS = 0.002  # paced runs send a small batch this often (bursts would queue)
STAMP = 20  # bytes of the body that carry the send time
ACCEPTED = 0x24


class Flow(MessagingHandler):  # type: ignore[misc]
    """Send `total` copies of one pre-encoded message and time them, decoding nothing.

    The body's first 20 bytes hold the send time, and a body is the tail of an encoded
    message: routers forward the bytes as they are and brokers only add sections in
    front, so the receiver reads the time at a fixed offset from the end. The bench
    measures the path, not the client's codec.
    """

    def __init__(
        self,
        endpoint: Account | str,
        address: str,
        total: int,
        *,
        role: str,
        presettled: bool,
        rate: float | None = None,
    ) -> None:
        super().__init__(prefetch=0, auto_accept=False, auto_settle=False)
        self.endpoint, self.address, self.role = endpoint, address, role
        self.total, self.presettled, self.rate = total, presettled, rate
        self.sent = self.received = self.settled = 0
        self.finished = 0.0
        self.first_ns = self.last_ns = 0
        self.outcomes: dict[int, int] = {}
        self.latencies: list[float] = []
        self.sender: Any = None
        self.connections: list[Any] = []
        encoded = Message(body=BODY).encode()
        self.head = encoded[: -len(BODY)]
        self.tail = BODY[STAMP:]

    def on_start(self, event: Any) -> None:
        container = event.container
        if self.role == "listen":  # path (a): the sender connects straight to us
            assert isinstance(self.endpoint, str)
            self.acceptor = container.listen(self.endpoint.removeprefix("amqp://"))
        elif self.role == "receive":
            receiver = container.create_receiver(self._connect(container), self.address)
            receiver.flow(CREDIT)
        else:
            self.sender = container.create_sender(self._connect(container), self.address)
            if self.presettled:
                self.sender.snd_settle_mode = 1  # SND_SETTLED
            if self.rate:
                container.schedule(PACE_SECONDS, self)

    def _connect(self, container: Container) -> Any:
        target = self.endpoint
        conn = (
            target.connect(container)
            if isinstance(target, Account)
            else container.connect(target, reconnect=False)
        )
        self.connections.append(conn)
        return conn

    def on_link_opening(self, event: Any) -> None:  # (a): the incoming half
        link = event.link
        if link.is_receiver:
            link.target.address = link.remote_target.address
            link.flow(CREDIT)

    def on_timer_task(self, event: Any) -> None:  # paced sending for latency runs
        self._send(max(1, round((self.rate or 0) * PACE_SECONDS)))
        if self.sent < self.total and not self.finished:
            event.container.schedule(PACE_SECONDS, self)

    def on_link_flow(self, event: Any) -> None:
        if event.link.is_sender and not self.rate:
            self._send(self.total)

    def _send(self, budget: int) -> None:
        if self.sender is None:
            return
        if not self.first_ns:
            self.first_ns = time.monotonic_ns()
        sender = self.sender
        while sender.credit and self.sent < self.total and budget > 0:
            delivery = sender.delivery(str(self.sent))
            sender.send(self.head + b"%020d" % time.monotonic_ns() + self.tail)
            sender.advance()
            if self.presettled:
                delivery.settle()
            self.sent += 1
            budget -= 1
        if self.presettled:
            self._maybe_finish()

    def on_delivery(self, event: Any) -> None:
        delivery = event.delivery
        link = delivery.link
        if link.is_receiver:
            if delivery.partial:
                return
            data = link.recv(delivery.pending)
            link.advance()
            self.received += 1
            stamp = int(data[-len(BODY) : -len(BODY) + STAMP])
            self.last_ns = time.monotonic_ns()
            self.latencies.append((self.last_ns - stamp) / 1e6)
            if not delivery.settled:
                delivery.update(ACCEPTED)
            delivery.settle()
            if link.credit < CREDIT // 2:
                link.flow(CREDIT - link.credit)
            self._maybe_finish()
        elif delivery.remote_state or delivery.settled:
            self.outcomes[delivery.remote_state] = self.outcomes.get(delivery.remote_state, 0) + 1
            delivery.settle()
            self.settled += 1
            self._maybe_finish()

    def _maybe_finish(self) -> None:
        """A receiver is done when every message arrived; a sender when every one is sent
        and, unless presettled, its outcome came back."""
        if self.role in ("receive", "listen"):
            if self.received == self.total:
                self._finish()
        elif self.sent == self.total and (self.presettled or self.settled == self.total):
            self._finish()

    def _finish(self) -> None:
        self.finished = time.perf_counter() or 1.0
        for conn in self.connections:
            conn.close()
        if getattr(self, "acceptor", None) is not None:
            self.acceptor.close()

    def figures(self) -> dict[str, Any]:
        lat = sorted(self.latencies)
        return {
            "messages": self.received,
            "last_ns": self.last_ns,
            "p50_ms": round(statistics.median(lat), 3) if lat else -1,
            "p99_ms": round(lat[int(len(lat) * 0.99) - 1], 3) if lat else -1,
        }


def run_flow(flow: Flow, timeout: float = 180) -> dict[str, Any]:
    container = Container(flow)
    deadline = time.monotonic() + timeout

    class Watchdog:
        def on_timer_task(self, event: Any) -> None:
            if time.monotonic() > deadline:
                event.container.stop()
            elif not flow.finished:
                event.container.schedule(1, self)

    container.schedule(1, Watchdog())
    container.run()
    if not flow.finished and flow.role == "send":
        raise RuntimeError(f"sender timed out: sent {flow.sent} of {flow.total}")
    return flow.figures()  # a receiver that timed out reports what it got


def in_child(work: Callable[[], dict[str, Any]]) -> Callable[[], dict[str, Any]]:
    """Run `work` in a forked child; the call returned waits for the child and gives its
    result (a failure there as {"error": ...}, rather than a parent left waiting)."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child
        os.close(read_end)
        code = 0
        try:
            result = work()
        except Exception as exc:
            result, code = {"error": f"{type(exc).__name__}: {exc}"}, 1
        os.write(write_end, json.dumps(result).encode())
        os._exit(code)
    os.close(write_end)

    def wait() -> dict[str, Any]:
        with os.fdopen(read_end, "rb") as pipe:
            found: dict[str, Any] = json.loads(pipe.read() or b"{}")
        os.waitpid(child, 0)
        return found

    return wait


def split_flow(
    sender: Account | str,
    receiver: Account | str,
    address: str,
    total: int,
    *,
    presettled: bool,
    rate: float | None = None,
    timeout: float = 180,
) -> dict[str, Any]:
    """Receiver in a forked child, sender here; throughput from first send to last receipt.
    A receiver still short after `timeout` seconds reports what it got; a sender still
    waiting for credit raises RuntimeError."""
    role = "listen" if isinstance(receiver, str) and receiver == sender else "receive"
    receiving = in_child(
        lambda: run_flow(Flow(receiver, address, total, role=role, presettled=presettled), timeout)
    )
    if role == "listen":
        port = int(str(receiver).rsplit(":", 1)[1])
        wait_until(lambda: port_is_listening(port), 10, "the receiving process to listen")
    flow = Flow(sender, address, total, role="send", presettled=presettled, rate=rate)
    run_flow(flow, timeout)
    accepted = flow.outcomes.get(ACCEPTED, 0)
    received = receiving()
    if "error" in received:
        raise RuntimeError(f"receiver failed: {received['error']}")
    elapsed = (received["last_ns"] - flow.first_ns) / 1e9
    return {
        "messages": received["messages"],
        "complete": received["messages"] == total,
        "sender_accepted": accepted if not presettled else None,
        "seconds": round(elapsed, 3),
        "msgs_per_s": round(received["messages"] / elapsed) if elapsed > 0 else 0,
        "p50_ms": received["p50_ms"],
        "p99_ms": received["p99_ms"],
    }


def parallel_direct(total: int, pairs: int) -> dict[str, Any]:
    """The clients' ceiling: `pairs` sender/receiver pairs at once, no router, each pair
    on a listener of its own, `total` messages each. One pair is bound by its own two
    processes; several show what the clients could offer a router."""

    def one_pair() -> dict[str, Any]:
        url = direct_url()
        return split_flow(url, url, "q", total, presettled=False)

    waits = [in_child(one_pair) for _ in range(pairs)]
    found = [wait() for wait in waits]
    errors = [f["error"] for f in found if "error" in f]
    if errors:
        raise RuntimeError(f"a client pair failed: {errors[0]}")
    messages = sum(f["messages"] for f in found)
    # Messages over the slowest pair's own span, first send to last receipt: the pairs
    # are started one after another without waiting, so their spans overlap (each pair's
    # own rate is kept beside it).
    seconds = max(f["seconds"] for f in found)
    return {
        "pairs": pairs,
        "messages": messages,
        "seconds": seconds,
        "msgs_per_s": round(messages / seconds) if seconds > 0 else 0,
        "per_pair_msgs_per_s": [f["msgs_per_s"] for f in found],
    }


def hold_connections(mesh: Mesh, count: int) -> dict[str, Any]:
    raise_open_files_limit()
    router = mesh.routers[0]
    assert router.process is not None
    before = rss_kb(router.process.pid)
    held = HeldConnections(router.amqp_port, "device@iot", mesh.passwords["device@iot"], "iot")
    seconds = held.open(count, timeout=180)
    figures = held_figures(held, seconds, before, rss_kb(router.process.pid))
    figures["router_still_serving"] = router.reachable_routers() == len(mesh.routers) - 1
    held.close()
    return figures


def memory_per_address(mesh: Mesh, count: int) -> dict[str, Any]:
    """Dynamic reply addresses: each is a new address with one consumer link."""
    router = mesh.routers[0]
    assert router.process is not None
    before = rss_kb(router.process.pid)

    class Many(MessagingHandler):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.opened = 0

        def on_start(self, event: Any) -> None:
            account = Account(mesh.url(0), "backend@iot", mesh.passwords["backend@iot"], "iot")
            self.conn = account.connect(event.container)
            for i in range(count):
                event.container.create_receiver(self.conn, None, dynamic=True, name=f"d{i}")

        def on_link_opened(self, event: Any) -> None:
            self.opened += 1
            if self.opened == count:
                self.after = rss_kb(router.process.pid)  # type: ignore[union-attr]
                self.conn.close()

    handler = Many()
    Container(handler).run()
    return {
        "addresses": count,
        "router_rss_kb_before": before,
        "router_rss_kb_after": handler.after,
        "kb_per_address": round((handler.after - before) / count, 2),
    }


def accounts(mesh: Mesh, producer: int, consumer: int) -> tuple[Account, Account]:
    def account(router: int, identity: str) -> Account:
        return Account(mesh.url(router), identity, mesh.passwords[identity], "iot")

    return account(producer, "device@iot"), account(consumer, "backend@iot")


def profile_summary(path: Path, lines: int = 12) -> list[str]:
    stats = pstats.Stats(str(path))
    rows = []
    for (file, line, name), (_, calls, own, cumulative, _) in sorted(
        stats.stats.items(),
        key=lambda item: -item[1][2],  # type: ignore[attr-defined]
    )[:lines]:
        rows.append(
            f"{own:7.3f}s own {cumulative:7.3f}s cum {calls:9d} calls  "
            f"{Path(file).name}:{line}({name})"
        )
    return rows


def both_modes(
    sender: Account | str, receiver: Account | str, address: str, n: int
) -> dict[str, Any]:
    return {
        mode: split_flow(sender, receiver, address, n, presettled=mode == "presettled")
        for mode in ("unsettled", "presettled")
    }


def at_half_load(
    sender: Account | str, receiver: Account | str, address: str, peak: float, n: int
) -> dict[str, Any]:
    """Latency when offered half of the path's peak unsettled rate."""
    paced = split_flow(
        sender, receiver, address, min(n, int(peak * 5)), presettled=False, rate=peak / 2
    )
    return {"rate": round(peak / 2), **paced}


def direct_url() -> str:
    return f"amqp://127.0.0.1:{free_port()}"


def start_stack(
    work: Path, profile: Path | None, topology: str = "chain"
) -> tuple[Mesh, RabbitMQBroker]:
    """3 routers (a chain by default; router 0 profiled to `profile` if given) in front of
    one RabbitMQ."""
    ports = allocate_ports()
    mesh = build_mesh(work / "mesh", routers=3, topology=topology, broker_port=ports.tls)
    broker = RabbitMQBroker(
        directory=work / "rabbitmq",
        definitions=work / "mesh/config/brokers/broker-0.definitions.json",
        pki=mesh.extra["pki"],  # type: ignore[arg-type]
        ports=ports,
    )
    broker.start()
    mesh.set_secret("enmesh-broker-router", "password", broker.router_password)
    if profile is not None:
        os.environ["ENMESH_ROUTER_PROFILE"] = str(profile)
    mesh.routers[0].start()
    os.environ.pop("ENMESH_ROUTER_PROFILE", None)
    for router in mesh.routers[1:]:
        router.start()
    mesh.wait_converged()
    return mesh, broker


def measure(
    mesh: Mesh, broker: RabbitMQBroker, n: int, connections: int, results: dict[str, Any]
) -> None:
    one, three = accounts(mesh, 0, 0), accounts(mesh, 0, 2)
    results["b_one_router"] = both_modes(*one, "telemetry", n)
    print("(b)", results["b_one_router"])
    results["c_three_routers"] = both_modes(*three, "telemetry", n)
    print("(c)", results["c_three_routers"])
    # The broker's default vhost is the routers' one: no `vhost:` hostname needed (proton
    # would also use it as the TLS peer name).
    rabbit = Account(
        broker.url, "enmesh-router", broker.router_password, "", broker.ca_cert, "PLAIN"
    )
    results["d_rabbitmq_queue"] = both_modes(rabbit, rabbit, "/amq/queue/iot.events", n)
    print("(d)", results["d_rabbitmq_queue"])
    peak_a = results["a_no_router"]["unsettled"]["msgs_per_s"]
    url = direct_url()
    results["a_no_router"]["half_load"] = at_half_load(url, url, "q", peak_a, n)
    for label, (producer, consumer) in (("b_one_router", one), ("c_three_routers", three)):
        peak = results[label]["unsettled"]["msgs_per_s"]
        results[label]["half_load"] = at_half_load(producer, consumer, "telemetry", peak, n)
    for label in ("a_no_router", "b_one_router", "c_three_routers"):
        print(f"{label} at half load:", results[label]["half_load"])
    results["memory_per_address"] = memory_per_address(mesh, 1000)
    print("memory per address:", results["memory_per_address"])
    results["connections"] = hold_connections(mesh, connections)
    print("connections:", results["connections"])


def summarise(results: dict[str, Any]) -> None:
    a, b, c, d = (
        results[k]["unsettled"]["msgs_per_s"]
        for k in ("a_no_router", "b_one_router", "c_three_routers", "d_rabbitmq_queue")
    )
    # The clients' ceiling against the router's unprofiled one-hop rate (the side by
    # side's median when it ran; (b) runs under the profiler).
    ceiling = results["a_no_router"]["parallel"]["msgs_per_s"]
    side = results.get("side_by_side")
    router_rate = side["medians"]["enmesh-router"]["one_hop_msgs_per_s"] if side else b
    results["ratios_unsettled"] = {
        "clients_ceiling_over_router": round(ceiling / router_rate, 2),
        "b_over_a": round(b / a, 2),
        "b_over_d": round(b / d, 2),
        "c_over_a": round(c / a, 2),
    }
    results["targets"] = {
        "clients_ceiling_ge_2x_router": ceiling >= 2 * router_rate,
        "b_ge_50pct_of_a": b >= 0.5 * a,
        "b_ge_2x_d": b >= 2 * d,
        "c_ge_30pct_of_a": c >= 0.3 * a,
        "p99_lt_5ms_half_load": results["b_one_router"]["half_load"]["p99_ms"] < 5,
        "held_1000_connections": results["connections"]["opened"] >= 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument(
        "--reference-router",
        type=Path,
        help="a qdrouterd binary: the same runs through it and enmesh-router, interleaved",
    )
    parser.add_argument("--runs", type=int, default=5, help="side-by-side rounds per router")
    parser.add_argument(
        "--pairs", type=int, default=2, help="client pairs at once for the clients' ceiling"
    )
    parser.add_argument(
        "--paced-rate", type=float, default=1000, help="msg/s of the side-by-side latency runs"
    )
    args = parser.parse_args()
    n = args.messages
    results: dict[str, Any] = {
        "messages": n,
        "body_bytes": len(BODY),
        "command": "benchmarks/router_throughput.py " + " ".join(sys.argv[1:]),
    }
    work = Path(tempfile.mkdtemp(prefix="enmesh-bench-"))
    profile = work / "router-0.prof"
    # (a) no router: one connection, this process at both ends
    url = direct_url()
    results["a_no_router"] = both_modes(url, url, "q", n)
    results["a_no_router"]["parallel"] = parallel_direct(n, args.pairs)
    print("(a)", results["a_no_router"])
    mesh, broker = start_stack(work, profile)
    try:
        measure(mesh, broker, n, args.connections, results)
        if args.reference_router:
            results["side_by_side"] = side_by_side(
                mesh,
                args.reference_router,
                functools.partial(split_flow, presettled=False),
                n=n,
                runs=args.runs,
                rate=args.paced_rate,
            )
    finally:
        mesh.stop()
        broker.stop()
    summarise(results)
    if profile.exists():
        results["router_profile_top"] = profile_summary(profile)
    results |= {"python": platform.python_version(), "cpus": len(os.sched_getaffinity(0))}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    print(json.dumps({k: results[k] for k in ("ratios_unsettled", "targets")}, indent=2))
    if "side_by_side" in results:
        shown = ("medians", "ratios_enmesh_over_reference", "targets")
        print(json.dumps({k: results["side_by_side"][k] for k in shown}, indent=2))
    for row in results.get("router_profile_top", []):
        print("  ", row)
    print(f"written to {RESULTS}")


if __name__ == "__main__":
    main()
