"""A whole migration, step by step, of the sample model with 100,000 stored messages.

Two stacks on this host (`source` and `target`, one router each, their own RabbitMQ
nodes, CAs and secrets; tests.support.migrate_ends). COUNT messages of SIZE bytes are
stored through the source mesh on the queue address iot/events, then the steps run as
`enmesh migrate` runs them: plan, prepare (the target gets the model and passwords,
applied live), bridge (one mesh; the source's routers use the target's brokers),
move-stored (dynamic shovels, on-confirm), and finish's check (the source holds no
message and no client). Prints and writes benchmarks/results/migrate_whole.json: each
step's wall time and the total.

    .venv/bin/python benchmarks/migrate_whole.py [--count 100000] [--size 1024]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.results_file import publish  # noqa: E402
from enmesh.migrate import bridge, finish, plan, prepare, shovel  # noqa: E402
from tests.router.conftest import account  # noqa: E402
from tests.support import apply_target, fill, migrate_ends  # noqa: E402
from tests.support.mesh import wait_until  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "migrate_whole.json"
T = TypeVar("T")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=1024)
    args = parser.parse_args()
    seconds: dict[str, float] = {}

    def timed(step: str, action: Callable[[], T]) -> T:
        started = time.monotonic()
        value = action()
        seconds[step] = round(time.monotonic() - started, 2)
        print(f"{step}: {seconds[step]} s", flush=True)
        return value

    with (
        tempfile.TemporaryDirectory(prefix="enmesh-migrate-whole-") as tmp,
        migrate_ends.source_and_target(Path(tmp) / "source", Path(tmp) / "target") as (
            source,
            target,
        ),
    ):
        options = account(source, 0, "device@iot").options()
        timed("store (not part of the migration)", lambda: fill.fill(
            options, "events", ["x" * args.size] * args.count
        ))  # fmt: skip
        wait_until(lambda: migrate_ends.depth(source, "iot.events") == args.count, 120, "stored")
        src, dst = (
            migrate_ends.stack_end("source", source),
            migrate_ends.stack_end("target", target),
        )
        found = timed("plan", lambda: plan.make_plan(src, dst))
        assert not found.conflicts and not found.blocked, found
        files = apply_target.stack_file(source), apply_target.stack_file(target)
        to = migrate_ends.side(target).target
        timed("prepare", lambda: prepare.prepare(*files, to, echo=print))
        sides = migrate_ends.side(source), migrate_ends.side(target)  # read after prepare
        key = migrate_ends.ca_key(source)
        timed("bridge", lambda: bridge.bridge(*sides, ca_key=key, echo=print))
        moved = timed("move-stored", lambda: shovel.move_stored(src, dst, progress=print))
        events = next(m for m in moved if m.queue == "iot.events")
        assert events.moved == args.count and events.source_after == 0, events
        left = timed("finish (the source checked empty)", lambda: finish.remaining(
            migrate_ends.stack_end("source", source), source.secrets_dir
        ))  # fmt: skip
        assert left.empty, left.text("source")
    steps = [s for s in seconds if not s.startswith("store")]
    result = {
        "benchmark": "a whole migration (plan, prepare, bridge, move-stored, finish)",
        "messages": args.count,
        "size_bytes": args.size,
        "seconds": seconds,
        "total_seconds": round(sum(seconds[s] for s in steps), 2),
        "host": platform.node(),
        "cpus": len(os.sched_getaffinity(0)),
    }
    return publish(result, RESULTS)


if __name__ == "__main__":
    sys.exit(main())
