"""`enmesh migrate move-stored`: messages moved per second between two stacks on this host.

Two meshes (one router each) with their own RabbitMQ nodes; COUNT messages of SIZE bytes
are sent through the source mesh to the queue address iot/events, then move_stored drains
them to the target (dynamic shovels, on-confirm). Prints and writes
benchmarks/results/migrate.json: fill rate, move wall time (plugin enable, users, plan,
shovels, counts) and messages/s, and the shovel phase alone (shovels started until none
left, as seen by move_stored's polling).

    .venv/bin/python benchmarks/migrate.py [--count 100000] [--size 1024]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.results_file import publish  # noqa: E402
from enmesh.migrate.shovel import move_stored  # noqa: E402
from tests.router.conftest import account  # noqa: E402
from tests.support.fill import fill as store  # noqa: E402
from tests.support.mesh import wait_until  # noqa: E402
from tests.support.migrate_ends import depth, stack_end  # noqa: E402
from tests.support.stack import brokered_mesh  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "migrate.json"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=1024)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="enmesh-migrate-bench-") as tmp, ExitStack() as s:
        source = s.enter_context(brokered_mesh(Path(tmp) / "source", routers=1))
        target = s.enter_context(brokered_mesh(Path(tmp) / "target", routers=1))
        options = account(source, 0, "device@iot").options()
        started = time.monotonic()
        store(options, "events", ["x" * args.size] * args.count)
        fill = time.monotonic() - started
        wait_until(lambda: depth(source, "iot.events") == args.count, 120, "source filled")
        marks: dict[str, float] = {}

        def progress(line: str) -> None:
            print(line, flush=True)
            if line.startswith("round 1"):
                marks["shovels"] = time.monotonic()
            elif line.startswith("  0 shovel(s) running"):
                marks["done"] = time.monotonic()

        started = time.monotonic()
        moved = move_stored(
            stack_end("source", source), stack_end("target", target), progress=progress
        )
        wall = time.monotonic() - started
        shovel = marks["done"] - marks["shovels"]
        events = next(m for m in moved if m.queue == "iot.events")
        assert events.moved == args.count and events.source_after == 0, events
    result = {
        "benchmark": "migrate move-stored",
        "messages": args.count,
        "size_bytes": args.size,
        "fill_seconds": round(fill, 2),
        "fill_messages_per_second": round(args.count / fill),
        "move_seconds": round(wall, 2),
        "move_messages_per_second": round(args.count / wall),
        "shovel_seconds": round(shovel, 2),
        "shovel_messages_per_second": round(args.count / shovel),
        "host": platform.node(),
        "cpus": len(os.sched_getaffinity(0)),
    }
    return publish(result, RESULTS)


if __name__ == "__main__":
    sys.exit(main())
