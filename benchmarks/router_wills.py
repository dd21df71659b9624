"""Wills soak: does a router stay flat while clients register, cancel and leave wills?

    .venv/bin/python benchmarks/router_wills.py [--cycles 20000] [--sample-every 1000]

Two routers (full mesh, `--will-store` on each), the sample model. One process keeps a
consumer of `telemetry` (backend@iot) on router 1, accepting everything. The main
process runs `--cycles` client lives on router 0, as device@iot, each: connect, attach a
sender to `$lwt`, send a will to `telemetry`, wait until it is accepted (stored), then
end: odd cycles detach the link first (the will is cancelled), even ones close the
connection with the link attached (the will is published, across the mesh, to the
consumer). Every `--sample-every` cycles router 0's resident memory (VmRSS) is sampled;
the first `--warm-up` of the run is warm-up. At the end: wills received must equal the
cycles that published one, and router 0's will store must be empty. Prints the figures
and writes benchmarks/results/router_wills.json.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import platform
import sqlite3
import sys
import tempfile
import time
from multiprocessing.sharedctypes import Synchronized
from pathlib import Path
from typing import Any

from proton import Message
from proton.handlers import MessagingHandler
from proton.reactor import Container

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.amqp import Account  # noqa: E402
from tests.support.fuzz import rss_kb  # noqa: E402
from tests.support.mesh import Mesh, build_mesh, wait_until  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "router_wills.json"
TARGET_GROWTH_KB = 5 * 1024


def account(mesh: Mesh, router: int, identity: str) -> Account:
    return Account(mesh.url(router), identity, mesh.passwords[identity], "iot")


class Consumer(MessagingHandler):  # type: ignore[misc]
    """Takes every published will; counts them."""

    def __init__(self, target: Account, received: Synchronized[int], ready: Any) -> None:
        super().__init__(prefetch=100)
        self.target, self.received, self.ready = target, received, ready

    def on_start(self, event: Any) -> None:
        event.container.create_receiver(self.target.connect(event.container), "telemetry")

    def on_link_opened(self, event: Any) -> None:
        self.ready.set()

    def on_message(self, event: Any) -> None:
        with self.received.get_lock():
            self.received.value += 1


def consume(target: Account, received: Synchronized[int], ready: Any) -> None:
    Container(Consumer(target, received, ready)).run()


class Churn(MessagingHandler):  # type: ignore[misc]
    """Client lives one after another: connect, register a will, cancel or leave it."""

    def __init__(self, client: Account, cycles: int, sample: Any) -> None:
        super().__init__()
        self.client, self.cycles, self.sample = client, cycles, sample
        self.done = 0
        self.published = 0

    def on_start(self, event: Any) -> None:
        self._next(event.container)

    def _next(self, container: Any) -> None:
        connection = self.client.connect(container)
        container.create_sender(connection, "$lwt")

    def on_sendable(self, event: Any) -> None:
        sender = event.sender
        if not getattr(sender, "will_sent", False):
            sender.will_sent = True
            sender.send(Message(address="telemetry", body=f"will {self.done}"))

    def on_accepted(self, event: Any) -> None:
        self.done += 1
        if self.done % 2:
            event.link.close()  # detach first: cancelled
        else:
            self.published += 1
        event.connection.close()
        if self.done % self.sample.every == 0:
            self.sample(self.done)
        if self.done < self.cycles:
            self._next(event.container)

    def on_rejected(self, event: Any) -> None:
        raise RuntimeError(f"a will was rejected: {event.delivery.remote.condition}")


class Sampler:
    def __init__(self, pid: int, every: int) -> None:
        self.pid, self.every = pid, every
        self.samples: list[tuple[int, int]] = []
        self.started = time.monotonic()

    def __call__(self, cycles: int) -> None:
        self.samples.append((cycles, rss_kb(self.pid)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cycles", type=int, default=20_000)
    parser.add_argument("--sample-every", type=int, default=1_000)
    parser.add_argument("--warm-up", type=float, default=0.25)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="enmesh-wills-") as work:
        mesh = build_mesh(Path(work) / "mesh", routers=2)
        stores = [Path(work) / f"wills-{r.index}.sqlite3" for r in mesh.routers]
        for router, store in zip(mesh.routers, stores, strict=True):
            router.options = ("--will-store", str(store))
        mesh.start()
        consumer = None
        try:
            mesh.wait_converged()
            received: Synchronized[int] = multiprocessing.Value("q", 0)  # type: ignore[assignment]
            ready = multiprocessing.Event()
            consumer = multiprocessing.Process(
                target=consume, args=(account(mesh, 1, "backend@iot"), received, ready)
            )
            consumer.start()
            if not ready.wait(30):
                raise RuntimeError("the consumer did not attach")
            router0 = mesh.routers[0].process
            assert router0 is not None
            sampler = Sampler(router0.pid, args.sample_every)
            sampler(0)
            churn = Churn(account(mesh, 0, "device@iot"), args.cycles, sampler)
            began = time.monotonic()
            Container(churn).run()
            seconds = time.monotonic() - began
            wait_until(
                lambda: received.value >= churn.published, 60, "every published will to arrive"
            )
            with sqlite3.connect(stores[0]) as db:
                left = int(db.execute("SELECT count(*) FROM wills").fetchone()[0])
        finally:
            if consumer is not None:
                consumer.terminate()
                consumer.join(10)
            mesh.stop()

    warm = [kb for cycles, kb in sampler.samples if cycles >= args.cycles * args.warm_up]
    growth = max(warm) - warm[0] if warm else 0
    result = {
        "benchmark": "router wills churn",
        "cycles": args.cycles,
        "cycles_per_second": round(args.cycles / seconds),
        "wills_published": churn.published,
        "wills_cancelled": args.cycles - churn.published,
        "wills_received": received.value,
        "wills_left_in_store": left,
        "rss_kb": sampler.samples,
        "rss_growth_after_warm_up_kb": growth,
        "target_growth_kb": TARGET_GROWTH_KB,
        "machine": {"cpus": multiprocessing.cpu_count(), "python": platform.python_version()},
    }
    print(json.dumps({k: v for k, v in result.items() if k != "rss_kb"}, indent=1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    ok = growth < TARGET_GROWTH_KB and left == 0 and received.value == churn.published
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
