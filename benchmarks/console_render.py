"""enmesh-console: time to serve an address space's page with 1,000 addresses.

A real router (the space's addresses configured in it) behind the console over HTTPS; the
page reads the model (git + runtime part), the router's connections and links through AMQP
management, and renders the table: its first page of 50 rows (and, apart, its last
page). Measured from the client over loopback, so an upper bound of the server-side time.
No broker runs here: asking RabbitMQ for the stored counts adds one `rabbitmqctl
list_queues` per page whatever the number of addresses (not measured here).
Target: < 500 ms. Results to benchmarks/results/console_render.json.

    .venv/bin/python benchmarks/console_render.py [--addresses 1000] [--requests 20]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.results_file import publish  # noqa: E402
from enmesh.console.pagination import PAGE_SIZE  # noqa: E402
from enmesh.model import load_model  # noqa: E402
from tests.support.console import OPS, Http, serve_console  # noqa: E402
from tests.support.mesh import SAMPLE_MODEL, build_mesh  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "console_render.json"


def model(addresses: int) -> str:
    text = SAMPLE_MODEL.read_text().replace("addresses: 50,", f"addresses: {addresses + 50},")
    kinds = [("anycast", "standard-anycast"), ("queue", "standard-queue")]
    for n in range(addresses):
        kind, plan = kinds[n % 2]
        text += (
            f"---\napiVersion: enmesh.io/v1\nkind: Address\nmetadata: {{name: iot.bench-{n}}}\n"
            f"spec: {{addressSpace: iot, address: bench-{n}, type: {kind}, plan: {plan}}}\n"
        )
    return text + OPS


def timed(http: Http, path: str, requests: int) -> tuple[list[float], int, str]:
    """Seconds per request (after two that warm Jinja's template cache), rows on the page,
    the page."""
    seconds, page = [], ""
    for _ in range(requests + 2):
        started = time.perf_counter()
        reply = http.request("GET", path)
        page = reply.read().decode()
        seconds.append(time.perf_counter() - started)
        assert reply.status == 200
    return seconds[2:], page.count('<tr id="address-'), page


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--addresses", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        model_file = Path(folder) / "bench.model.yml"
        model_file.write_text(model(args.addresses))
        iot = next(t for t in load_model([model_file]).tenants if t.name == "iot")
        total = len(iot.addresses)
        mesh = build_mesh(Path(folder) / "mesh", routers=1, models=[model_file])
        mesh.start()
        try:
            with serve_console(mesh) as console:
                http = Http(console)
                assert http.login("ops@iot", mesh.passwords["ops@iot"]).status == 303
                seconds, rows, page = timed(http, "/spaces/iot", args.requests)
                shown = f"1\N{EN DASH}{min(PAGE_SIZE, total)} of {total:,}"
                assert shown in page, f"the page does not say {shown!r}"
                last = -(-total // PAGE_SIZE)
                last_seconds, _, _ = timed(http, f"/spaces/iot?page={last}", args.requests)
        finally:
            mesh.stop()
    result = {
        "benchmark": "console_render",
        "addresses": args.addresses,
        "page_size": PAGE_SIZE,
        "rows_rendered": rows,
        "requests": args.requests,
        "median_ms": round(statistics.median(seconds) * 1000, 1),
        "p95_ms": round(sorted(seconds)[int(len(seconds) * 0.95) - 1] * 1000, 1),
        "max_ms": round(max(seconds) * 1000, 1),
        "last_page_median_ms": round(statistics.median(last_seconds) * 1000, 1),
        "target_ms": 500,
        "host": platform.node(),
        "python": platform.python_version(),
    }
    return publish(result, RESULTS)


if __name__ == "__main__":
    sys.exit(main())
