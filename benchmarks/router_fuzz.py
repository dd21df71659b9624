"""Router fuzz benchmark: random and mutated AMQP frames against a real router.

    .venv/bin/python benchmarks/router_fuzz.py [--seconds 300] [--kinds random,mutated,...]

One router (compiled stack, a space that allows SASL ANONYMOUS so frames reach open and
attach; login throttling off so the fuzzer is not throttled). The fuzzer of
tests/support/fuzz.py runs for `--seconds` (default 5 minutes); afterwards the router
must still serve. Prints and writes benchmarks/results/router_fuzz.json: connections,
tracebacks in the router's log (must be 0), whether the router survived, its RSS at the
start (after a 5 s warm-up) and the end.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support import fuzz, probes
from tests.support.mesh import build_mesh

RESULTS = Path(__file__).resolve().parent / "results" / "router_fuzz.json"


def run(seconds: float, kinds: list[str], seed: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="router-fuzz-") as tmp:
        model = Path(tmp) / "public.model.yml"
        model.write_text(probes.ANONYMOUS_MODEL)
        security: dict[str, object] = {"loginThrottle": {"maxFailures": 10**9}}
        mesh = build_mesh(Path(tmp) / "mesh", routers=1, models=[model], security=security)
        mesh.start()
        router = mesh.routers[0]
        assert router.process is not None
        try:
            fuzz.run_fuzz(router.amqp_port, 5, seed, kinds=kinds)  # warm-up
            start_kb = fuzz.rss_kb(router.process.pid)
            started = time.monotonic()
            try:
                stats = fuzz.run_fuzz(router.amqp_port, seconds, seed + 1, kinds=kinds)
            except ConnectionRefusedError:
                stats = fuzz.FuzzStats()  # the router died: reported below
            elapsed = time.monotonic() - started
            alive = router.process.poll() is None
            end_kb = fuzz.rss_kb(router.process.pid) if alive else 0
            serves = alive and "enmesh_router_uptime_seconds" in router.metrics()
            return {
                "seconds": round(elapsed, 1),
                "kinds": kinds,
                "connections": stats.connections,
                "closed_by_router": stats.closed_by_router,
                "bytes_sent": stats.bytes_sent,
                "tracebacks_in_log": fuzz.tracebacks(router.log),
                "router_alive": alive,
                "router_exit_code": router.process.returncode,
                "router_serves_after": serves,
                "router_rss_kb_start": start_kb,
                "router_rss_kb_end": end_kb,
                "rss_change_percent": round(100 * (end_kb - start_kb) / start_kb, 1),
            }
        finally:
            mesh.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument(
        "--kinds", default=",".join(fuzz.SAFE_KINDS), help="of " + ", ".join(fuzz.KINDS)
    )
    parser.add_argument("--seed", type=int, default=20)
    args = parser.parse_args()
    results = run(args.seconds, args.kinds.split(","), args.seed)
    for key, value in results.items():
        print(f"{key}: {value}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"written to {RESULTS}")
    ok = results["tracebacks_in_log"] == 0 and results["router_alive"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
