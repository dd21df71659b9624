"""Router soak: is each router's memory flat over millions of messages?

    .venv/bin/python benchmarks/router_soak.py [--messages 10000000] [--sample-every 100000]

A 3-router full mesh in front of one RabbitMQ carries three flows at once, each in a
process of its own, until the producers have sent `--messages` in all:
  anycast    device@iot on router 0 -> backend@iot on router 2, `telemetry`, unsettled
  multicast  backend@iot on router 1 -> device@iot on routers 0, 1 and 2, `broadcast`,
             presettled (how multicast travels)
  queue      device@iot on router 0 -> RabbitMQ -> backend@iot on router 2, `events`,
             unsettled (waypoint autoLinks)
Every `--sample-every` messages sent, the resident memory (VmRSS) of each router is
sampled. The first `--warm-up` fraction of the run is warm-up (allocator arenas, proton
buffers and the routers' address tables reach their working size); the target is that
no router then grows by 5 MB or more. Prints the figures and writes
benchmarks/results/router_soak.json.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import sys
import tempfile
import time
from dataclasses import dataclass
from multiprocessing.sharedctypes import Synchronized
from pathlib import Path
from typing import Any

from proton import Message
from proton.handlers import MessagingHandler
from proton.reactor import Container

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.router_throughput import start_stack  # noqa: E402
from tests.support.amqp import Account  # noqa: E402
from tests.support.fuzz import rss_kb  # noqa: E402
from tests.support.mesh import Mesh  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "router_soak.json"
TARGET_GROWTH_KB = 5 * 1024
CREDIT = 250
ACCEPTED = 0x24
BODY = Message(body=b"x" * 100).encode()


@dataclass(frozen=True)
class FlowSpec:
    name: str
    address: str
    producer: tuple[int, str]  # (router, identity)
    consumers: tuple[tuple[int, str], ...]
    presettled: bool


FLOWS = (
    FlowSpec("anycast", "telemetry", (0, "device@iot"), ((2, "backend@iot"),), False),
    FlowSpec(
        "multicast",
        "broadcast",
        (1, "backend@iot"),
        ((0, "device@iot"), (1, "device@iot"), (2, "device@iot")),
        True,
    ),
    FlowSpec("queue", "events", (0, "device@iot"), ((2, "backend@iot"),), False),
)


class Counters:
    """Shared between the flow processes and the sampler: sent, received, settled."""

    def __init__(self) -> None:
        self.sent: Synchronized[int] = multiprocessing.Value("q", 0)  # type: ignore[assignment]
        self.received: Synchronized[int] = multiprocessing.Value("q", 0)  # type: ignore[assignment]
        self.settled: Synchronized[int] = multiprocessing.Value("q", 0)  # type: ignore[assignment]
        self.stop: Synchronized[int] = multiprocessing.Value("b", 0)  # type: ignore[assignment]


class SoakFlow(MessagingHandler):  # type: ignore[misc]
    """One producer and its consumers in one container: send while `stop` is unset,
    then close once every consumer has what was sent (or, presettled, after a grace)."""

    def __init__(self, spec: FlowSpec, accounts: dict[tuple[int, str], Account], c: Counters):
        super().__init__(prefetch=0, auto_accept=False, auto_settle=False)
        self.spec, self.accounts, self.counters = spec, accounts, c
        self.sent = self.received = self.settled = 0
        self.ready = 0
        self.sender: Any = None
        self.connections: list[Any] = []
        self.finishing_since = 0.0

    def on_start(self, event: Any) -> None:
        self.container = event.container
        for place in self.spec.consumers:
            conn = self.accounts[place].connect(self.container)
            self.connections.append(conn)
            self.container.create_receiver(conn, self.spec.address, name=f"consumer-{place[0]}")
        self.container.schedule(0.2, self)

    def on_link_opened(self, event: Any) -> None:
        link = event.link
        if link.is_receiver:
            link.flow(CREDIT)
            self.ready += 1
            if self.ready == len(self.spec.consumers):
                conn = self.accounts[self.spec.producer].connect(self.container)
                self.connections.append(conn)
                self.sender = self.container.create_sender(conn, self.spec.address)
                if self.spec.presettled:
                    self.sender.snd_settle_mode = 1  # SND_SETTLED

    def on_link_flow(self, event: Any) -> None:
        if event.link is self.sender:
            self._send()

    def _send(self) -> None:
        sender = self.sender
        batch = 0
        while sender.credit and not self.counters.stop.value and batch < CREDIT:
            delivery = sender.delivery(str(self.sent))
            sender.send(BODY)
            sender.advance()
            if self.spec.presettled:
                delivery.settle()
            self.sent += 1
            batch += 1
        if batch:
            with self.counters.sent.get_lock():
                self.counters.sent.value += batch

    def on_delivery(self, event: Any) -> None:
        delivery = event.delivery
        link = delivery.link
        if link.is_receiver:
            if delivery.partial:
                return
            link.recv(delivery.pending)
            link.advance()
            if not delivery.settled:
                delivery.update(ACCEPTED)
            delivery.settle()
            self.received += 1
            if link.credit < CREDIT // 2:
                link.flow(CREDIT - link.credit)
            if self.received % 1000 == 0:
                with self.counters.received.get_lock():
                    self.counters.received.value += 1000
        elif delivery.remote_state or delivery.settled:
            delivery.settle()
            self.settled += 1

    def on_timer_task(self, event: Any) -> None:
        """Keep sending (credit may have come while we were busy); finish when told."""
        if self.sender is not None and not self.counters.stop.value:
            self._send()
        if self.counters.stop.value and self._drained():
            with self.counters.settled.get_lock():
                self.counters.settled.value += self.settled
            for conn in self.connections:
                conn.close()
            return
        self.container.schedule(0.2, self)

    def _drained(self) -> bool:
        if not self.spec.presettled:  # every outcome back, every message consumed
            return self.settled == self.sent and self.received >= self.sent
        # Presettled: nothing to wait for but copies still in flight; give them a moment.
        if not self.finishing_since:
            self.finishing_since = time.monotonic()
        return time.monotonic() - self.finishing_since > 2.0


def run_flow(spec: FlowSpec, accounts: dict[tuple[int, str], Account], c: Counters) -> None:
    flow = SoakFlow(spec, accounts, c)
    Container(flow).run()
    result = {"sent": flow.sent, "received": flow.received, "settled": flow.settled}
    Path(os.environ["SOAK_OUT"], f"{spec.name}.json").write_text(json.dumps(result))


def soak(mesh: Mesh, work: Path, total: int, every: int, warm_up: float) -> dict[str, Any]:
    accounts = {
        (router, identity): Account(mesh.url(router), identity, mesh.passwords[identity], "iot")
        for router in range(3)
        for identity in ("device@iot", "backend@iot")
    }
    pids = [router.process.pid for router in mesh.routers if router.process is not None]
    counters = Counters()
    os.environ["SOAK_OUT"] = str(work)
    processes = [
        multiprocessing.Process(target=run_flow, args=(spec, accounts, counters)) for spec in FLOWS
    ]
    samples = [{"sent": 0, "seconds": 0.0, "rss_kb": [rss_kb(pid) for pid in pids]}]
    started = time.monotonic()
    for process in processes:
        process.start()
    next_sample = every
    while counters.sent.value < total:
        if any(not p.is_alive() for p in processes):
            raise RuntimeError("a flow process ended early")
        if counters.sent.value >= next_sample:
            sample = {
                "sent": counters.sent.value,
                "seconds": round(time.monotonic() - started, 1),
                "rss_kb": [rss_kb(pid) for pid in pids],
            }
            samples.append(sample)
            next_sample += every
            if len(samples) % 10 == 0:
                print(
                    f"  {sample['sent']:>10,} sent, {sample['seconds']:>7.1f} s, RSS kB",
                    sample["rss_kb"],
                    flush=True,
                )
        time.sleep(0.05)  # sampling cadence, not a readiness wait
    counters.stop.value = 1
    for process in processes:
        process.join(120)
    seconds = time.monotonic() - started
    samples.append(
        {
            "sent": counters.sent.value,
            "seconds": round(seconds, 1),
            "rss_kb": [rss_kb(pid) for pid in pids],
        }
    )
    flows = {spec.name: json.loads((work / f"{spec.name}.json").read_text()) for spec in FLOWS}
    return summarise(samples, flows, total, seconds, warm_up)


def summarise(
    samples: list[dict[str, Any]], flows: dict[str, Any], total: int, seconds: float, warm_up: float
) -> dict[str, Any]:
    after_warm_up = [s for s in samples if s["sent"] >= warm_up * total]
    baseline = after_warm_up[0]["rss_kb"]
    growth = [
        max(s["rss_kb"][i] for s in after_warm_up) - baseline[i] for i in range(len(baseline))
    ]
    return {
        "messages_sent": samples[-1]["sent"],
        "seconds": round(seconds, 1),
        "msgs_per_s": round(samples[-1]["sent"] / seconds),
        "flows": flows,
        "warm_up_messages": after_warm_up[0]["sent"],
        "rss_kb_at_start": samples[0]["rss_kb"],
        "rss_kb_after_warm_up": baseline,
        "rss_kb_at_end": samples[-1]["rss_kb"],
        "max_growth_after_warm_up_kb": growth,
        "target_growth_lt_kb": TARGET_GROWTH_KB,
        "target_met": all(g < TARGET_GROWTH_KB for g in growth),
        "samples": samples,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000_000)
    parser.add_argument("--sample-every", type=int, default=100_000)
    parser.add_argument("--warm-up", type=float, default=0.1, help="fraction of the run")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="enmesh-soak-") as tmp:
        work = Path(tmp)
        mesh, broker = start_stack(work, profile=None, topology="full-mesh")
        try:
            result = soak(mesh, work, args.messages, args.sample_every, args.warm_up)
        finally:
            mesh.stop()
            broker.stop()
    result = {
        "benchmark": "router_soak",
        "command": "benchmarks/router_soak.py " + " ".join(sys.argv[1:]),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        **result,
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    growth = ", ".join(f"{g / 1024:.1f}" for g in result["max_growth_after_warm_up_kb"])
    print(
        f"{result['messages_sent']:,} messages in {result['seconds']} s"
        f" ({result['msgs_per_s']} msg/s); router RSS after warm-up"
        f" {[round(k / 1024, 1) for k in result['rss_kb_after_warm_up']]} MB,"
        f" at end {[round(k / 1024, 1) for k in result['rss_kb_at_end']]} MB;"
        f" growth after warm-up {growth} MB (target < 5):"
        f" {'met' if result['target_met'] else 'MISSED'}"
    )
    print(f"flows: {result['flows']}")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
