"""`enmesh migrate bridge` and the clients that move across it: what a client sees.

Two meshes (one router each, their own RabbitMQ nodes and CAs) are bridged (the step's
wall time is measured: certificate, both applies, the meshes joining). Then a consumer
and a producer of the anycast address iot/telemetry move between the two stacks in
turns, ROUNDS times each, while the producer sends unsettled messages as fast as each is
accepted by the consumer. A move closes the client's connection and opens one to the
other stack. The interruption a client sees is the time from the last message it had
accepted (producer) or received (consumer) before the move to the first one after it:
connecting, SASL, attaching, and for the producer waiting for credit. Prints and writes
benchmarks/results/migrate_switch.json (median and max per role, the issue's target: under
5 s).

    .venv/bin/python benchmarks/migrate_switch.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.results_file import publish  # noqa: E402
from enmesh.migrate.bridge import bridge  # noqa: E402
from tests.support.mesh import wait_until  # noqa: E402
from tests.support.migrate_ends import ca_key, side, source_and_target  # noqa: E402
from tests.support.switching import Consumer, Producer, gaps, move  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "migrate_switch.json"


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "moves": len(values),
        "median_seconds": round(statistics.median(values), 3),
        "max_seconds": round(max(values), 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="enmesh-switch-bench-") as tmp, ExitStack() as s:
        source, target = s.enter_context(source_and_target(Path(tmp) / "s", Path(tmp) / "t"))
        started = time.monotonic()
        bridge(side(source), side(target), ca_key=ca_key(source), echo=lambda _: None)
        bridged = time.monotonic() - started
        consumer = Consumer("consumer", "backend@iot", "telemetry", source)
        producer = Producer("producer", "device@iot", "telemetry", source)
        try:
            for client in (consumer, producer):
                client.start()
                assert client.started.wait(60) and client.error is None, client.error
            wait_until(lambda: len(consumer.got) >= 200, 60, "messages flowing")
            meshes = [target, source]
            for round_number in range(args.rounds):
                to = meshes[round_number % 2]
                move(consumer, to, more=50)
                move(producer, to, more=50)
            sent = len(producer.sent)
        finally:
            for client in (producer, consumer):
                client.stop.set()
                client.join(60)
        elapsed = producer.times[-1] - producer.times[0]
    result = {
        "benchmark": "migrate bridge: clients moving between two bridged stacks",
        "bridge_seconds": round(bridged, 2),
        "anycast_producer_interruption": _summary(gaps(producer)),
        "anycast_consumer_interruption": _summary(gaps(consumer)),
        "messages": sent,
        "messages_per_second": round(sent / elapsed),
        "target_interruption_seconds": 5,
        "host": platform.node(),
        "cpus": len(os.sched_getaffinity(0)),
    }
    return publish(result, RESULTS)


if __name__ == "__main__":
    sys.exit(main())
