"""Connections on one enmesh-router: how fast it admits them (SCRAM-SHA-256, and PLAIN
inside TLS; the router's CPU per connection), then 10,000 concurrent authenticated ones
(issue 28): memory per idle connection at each step, the CPU the router spends keeping
them (heartbeats), and whether it still serves a new client while holding them all.

Each connection logs in with SASL SCRAM-SHA-256 against the router's sasldb as the sample
model's `device@iot` (whose plan is raised to admit them) and then stays idle; the
client is this process, with at most 200 handshakes in flight
(tests.support.connection_hold). Writes benchmarks/results/router_connections.json.

With `--reference-router PATH` (a qdrouterd 1.19 you built, as for router_throughput.py)
the same compiled config, sasldb and clients then go through PATH, and the JSON holds its
figures beside enmesh-router's and their ratios: qdrouterd's memory per idle connection is
the anchor issue 28 names. Each phase (the set-up rates, then the held connections) runs on
one engine and then on the other, so the two are measured close in time.

    .venv/bin/python benchmarks/router_connections.py [--connections 10000] [--steps 4]
        [--reference-router PATH]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from proton import Message  # noqa: E402

from benchmarks.results_file import publish  # noqa: E402
from benchmarks.router_reference import ENMESH, engine_routers, reference_label  # noqa: E402
from tests.router.conftest import account  # noqa: E402
from tests.support import amqp, connection_hold  # noqa: E402
from tests.support.connect_load import churn_costing, cpu_seconds  # noqa: E402
from tests.support.fuzz import rss_kb  # noqa: E402
from tests.support.mesh import SAMPLE_MODEL, Mesh, RouterProcess, build_mesh  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "router_connections.json"
IDLE_SECONDS = 10.0  # how long the router's CPU is watched while it only holds them


def roomy_model(directory: Path, connections: int) -> Path:
    """The sample model with the iot plan admitting `connections` and some to spare."""
    text = SAMPLE_MODEL.read_text(encoding="utf-8")
    limit = "resourceLimits: {connections: 1000,"
    if limit not in text:
        raise SystemExit(f"{SAMPLE_MODEL}: no `{limit}` to raise")
    model = directory / SAMPLE_MODEL.name
    model.write_text(text.replace(limit, f"resourceLimits: {{connections: {connections + 100},"))
    return model


class RoundTrip(amqp.Scenario):
    """`consumer` receives `telemetry`; once its link is open `producer` sends it one
    message; done when it is accepted (settled end to end)."""

    def __init__(self, consumer: amqp.Account, producer: amqp.Account) -> None:
        super().__init__()
        self.consumer, self.producer, self.sent = consumer, producer, False

    def on_start(self, event: Any) -> None:
        event.container.create_receiver(self.open(self.consumer), "telemetry", name="consumer")

    def on_link_opened(self, event: Any) -> None:
        if event.link.name == "consumer":
            conn = self.open(self.producer)
            event.container.create_sender(conn, "telemetry", name="producer")

    def on_sendable(self, event: Any) -> None:
        if event.link.name == "producer" and not self.sent:
            self.sent = True
            event.sender.send(Message(body="still serving"))

    def on_accepted(self, event: Any) -> None:
        self.done()


def _round_trip(consumer: amqp.Account, producer: amqp.Account) -> float:
    started = time.perf_counter()
    amqp.run(RoundTrip(consumer, producer), timeout=120)
    return (time.perf_counter() - started) * 1000


def round_trip_ms(mesh: Mesh) -> float:
    """A new client's message through the router to a new consumer, while it holds the
    rest; in a process of its own (proton's container selects on descriptors < 1024)."""
    accounts = account(mesh, 0, "backend@iot"), account(mesh, 0, "device@iot")
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_round_trip, *accounts).result()


def measure(mesh: Mesh, total: int, steps: int) -> dict[str, Any]:
    router = mesh.routers[0]
    assert router.process is not None
    pid = router.process.pid
    held = connection_hold.HeldConnections(
        router.amqp_port, "device@iot", mesh.passwords["device@iot"], "iot"
    )
    baseline = rss_kb(pid)
    rows: list[dict[str, Any]] = []
    try:
        for step in range(1, steps + 1):
            target, held_before = total * step // steps, held.opened
            cpu_before = cpu_seconds(pid)
            seconds = held.open(target - held.wanted)
            opening_cpu = cpu_seconds(pid) - cpu_before
            idle_before = cpu_seconds(pid)
            held.serve(IDLE_SECONDS)
            idle_cpu = cpu_seconds(pid) - idle_before
            rss = rss_kb(pid)
            rows.append(
                {
                    "held": held.opened,
                    "failed": held.failed,
                    "seconds_to_open_step": round(seconds, 1),
                    "router_cpu_ms_per_login": round(
                        opening_cpu * 1000 / max(held.opened - held_before, 1), 2
                    ),
                    "router_rss_mb": round(rss / 1024, 1),
                    "kb_per_idle_connection": round((rss - baseline) / max(held.opened, 1), 1),
                    "router_idle_cpu_percent": round(idle_cpu / IDLE_SECONDS * 100, 1),
                    "new_client_round_trip_ms": round(round_trip_ms(mesh), 1),
                }
            )
            print(rows[-1], flush=True)
    finally:
        held.close()
    return {"router_rss_mb_before": round(baseline / 1024, 1), "steps": rows}


def set_up_rates(mesh: Mesh, count: int) -> dict[str, Any]:
    """Connection set-up alone (open, then close at once) from 2 client processes with 8
    handshakes each in flight: SCRAM-SHA-256 on the plain port, PLAIN inside TLS on the
    amqps port; the router's CPU per connection says what one router core admits."""
    router = mesh.routers[0]
    assert router.process is not None
    rates: dict[str, Any] = {}
    for name, tls in (("scram_sha_256", False), ("plain_over_tls", True)):
        user = account(mesh, 0, "device@iot", tls=tls)
        loaded, (cpu,) = churn_costing(user, count, 2, 8, [router.process.pid])
        rates[name] = {**loaded.summary(), "router_cpu_ms_per_connection": round(cpu * 1000, 2)}
        print(name, rates[name], flush=True)
    return rates


def on_each_engine(
    mesh: Mesh, engines: dict[str, list[RouterProcess]], work: Callable[[Mesh], dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """`work` on each engine in turn, its router freshly started on the same config."""
    found: dict[str, dict[str, Any]] = {}
    for engine, routers in engines.items():
        mesh.stop()
        mesh.routers = routers
        mesh.start()
        print(f"{engine}:", flush=True)
        found[engine] = work(mesh)
    mesh.stop()
    return found


def ratios(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, float]:
    """enmesh-router over the reference: the set-up CPU, and the last step's figures."""
    pairs = {
        f"{way}_router_cpu_ms_per_connection": (
            ours["set_up"][way]["router_cpu_ms_per_connection"],
            theirs["set_up"][way]["router_cpu_ms_per_connection"],
        )
        for way in ours["set_up"]
    }
    last_ours, last_theirs = ours["steps"][-1], theirs["steps"][-1]
    for key in ("kb_per_idle_connection", "router_idle_cpu_percent", "new_client_round_trip_ms"):
        pairs[key] = (last_ours[key], last_theirs[key])
    return {key: round(a / b, 2) for key, (a, b) in pairs.items() if b}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--connections", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument(
        "--reference-router", type=Path, help="a qdrouterd binary to measure the same way"
    )
    args = parser.parse_args()
    limit = connection_hold.raise_open_files_limit()
    if limit < args.connections + 1000:
        raise SystemExit(f"open files limit {limit}: too low for {args.connections} connections")
    work = Path(tempfile.mkdtemp(prefix="enmesh-connections-"))
    mesh = build_mesh(work, routers=1, models=[roomy_model(work, args.connections)])
    engines = {ENMESH: engine_routers(mesh, None)}
    reference = args.reference_router
    label = reference_label(reference) if reference is not None else ""
    if reference is not None:
        engines[label] = engine_routers(mesh, reference.absolute())
    try:  # each phase on one engine, then on the other: close in time, on a drifting machine
        set_up = on_each_engine(mesh, engines, lambda m: {"set_up": set_up_rates(m, 1000)})
        held = on_each_engine(mesh, engines, lambda m: measure(m, args.connections, args.steps))
    finally:
        mesh.stop()
        shutil.rmtree(work, ignore_errors=True)
    figures = set_up[ENMESH] | held[ENMESH]
    if reference is not None:
        theirs = set_up[label] | held[label]
        figures["reference"] = {"router": str(reference), "label": label, **theirs}
        figures["ratios_enmesh_over_reference"] = ratios(figures, theirs)
    figures |= {
        "connections": args.connections,
        "idle_seconds_watched": IDLE_SECONDS,
        "python": platform.python_version(),
        "cpus": len(os.sched_getaffinity(0)),
    }
    publish(figures, RESULTS)


if __name__ == "__main__":
    main()
