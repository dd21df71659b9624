"""Sessions on one connection: what a router spends when a client keeps its connection and
opens and ends sessions on it, as the MQTT gateway does for its devices (each device a
session with a receiver and a sender on its user's shared connection, docs/mqtt.md).

One client connection (SCRAM-SHA-256, the sample model's `device@iot`) opens `--sessions`
sessions, each with a receiver from the multicast `broadcast` and a sender to the anycast
`telemetry`, then ends them one after another, each end waiting for the router's; a
first round of the same warms the router up, the second is measured. Printed
and written to benchmarks/results/router_sessions.json: the router's CPU per session
opened and per session ended (from /proc), and its RSS before, with all sessions open,
and after (what the ended sessions left behind). Sessions end oldest first, so the CPU
per ended session is an average over a connection going from 2N links to none; a router
that looks through every link of the connection at each session's end spends more per
session the more there are. /proc counts CPU in 10 ms ticks: at 2,000 sessions the
opening takes some 10 to 20 of them, the ending hundreds.

With `--reference-router PATH` (a qdrouterd you built, as for router_throughput.py) the
same run goes through PATH on the same compiled config, and the JSON holds both and their
ratios.

    .venv/bin/python benchmarks/router_sessions.py [--sessions 2000] [--reference-router PATH]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from proton import Endpoint, Session  # noqa: E402
from proton.utils import BlockingConnection  # noqa: E402

from benchmarks.results_file import publish  # noqa: E402
from benchmarks.router_connections import on_each_engine  # noqa: E402
from benchmarks.router_reference import ENMESH, engine_routers, reference_label  # noqa: E402
from tests.router.conftest import account  # noqa: E402
from tests.support.connect_load import cpu_seconds  # noqa: E402
from tests.support.device_sessions import open_device_session  # noqa: E402
from tests.support.fuzz import rss_kb  # noqa: E402
from tests.support.mesh import Mesh, build_mesh  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "router_sessions.json"
TIMEOUT = 120.0


def _open_sessions(client: BlockingConnection, count: int) -> list[Session]:
    """`count` sessions, returned once the router has handled all of them: proton writes
    every begin, then every attach, then every flow, so the last session's links being
    attached is not enough; one more session opened after them (in the list too) is the
    round trip that covers the flows."""
    links = [open_device_session(client, f"device-{i}") for i in range(count)]
    receiver, sender = links[-1]
    client.wait(
        lambda: bool(receiver.state & sender.state & Endpoint.REMOTE_ACTIVE), timeout=TIMEOUT
    )
    marker = client.conn.session()
    marker.open()
    client.wait(lambda: bool(marker.state & Endpoint.REMOTE_ACTIVE), timeout=TIMEOUT)
    return [receiver.session for receiver, _ in links] + [marker]


def _end_sessions(client: BlockingConnection, sessions: list[Session]) -> None:
    for session in sessions:
        session.close()
        client.wait(lambda s=session: bool(s.state & Endpoint.REMOTE_CLOSED), timeout=TIMEOUT)
        session.free()


def sessions_on_one_connection(mesh: Mesh, count: int) -> dict[str, Any]:
    """Two rounds of `count` sessions opened and ended; the second is measured (the first
    grows the router's heaps to their working size)."""
    router = mesh.routers[0].process
    assert router is not None
    client = account(mesh, 0, "device@iot").blocking()
    try:
        _end_sessions(client, _open_sessions(client, count))
        rss_before = rss_kb(router.pid)
        cpu_before, began = cpu_seconds(router.pid), time.monotonic()
        sessions = _open_sessions(client, count)
        cpu_open, opened = cpu_seconds(router.pid), time.monotonic()
        rss_open = rss_kb(router.pid)
        _end_sessions(client, sessions)
        cpu_end, ended = cpu_seconds(router.pid), time.monotonic()
        rss_after = rss_kb(router.pid)
    finally:
        client.close()
    figures = {
        "router_cpu_us_per_session_opened": round((cpu_open - cpu_before) / count * 1e6),
        "router_cpu_us_per_session_ended": round((cpu_end - cpu_open) / count * 1e6),
        "open_seconds": round(opened - began, 2),
        "end_seconds": round(ended - opened, 2),
        "router_rss_kb": {"before": rss_before, "all_open": rss_open, "all_ended": rss_after},
        "router_kb_left_per_ended_session": round((rss_after - rss_before) / count, 2),
    }
    print(figures, flush=True)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument(
        "--reference-router", type=Path, help="a qdrouterd binary to measure the same way"
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="enmesh-sessions-"))
    mesh = build_mesh(work, routers=1)  # the sample model: one connection is within its plans
    engines = {ENMESH: engine_routers(mesh, None)}
    reference = args.reference_router
    label = reference_label(reference) if reference is not None else ""
    if reference is not None:
        engines[label] = engine_routers(mesh, reference.absolute())
    try:
        found = on_each_engine(
            mesh, engines, lambda m: sessions_on_one_connection(m, args.sessions)
        )
    finally:
        mesh.stop()
        shutil.rmtree(work, ignore_errors=True)
    figures: dict[str, Any] = dict(found[ENMESH])
    if reference is not None:
        theirs = found[label]
        figures["reference"] = {"router": str(reference), "label": label, **theirs}
        figures["ratios_enmesh_over_reference"] = {
            key: round(figures[key] / theirs[key], 2)
            for key in ("router_cpu_us_per_session_opened", "router_cpu_us_per_session_ended")
            if theirs[key]
        }
    figures |= {
        "sessions": args.sessions,
        "links_per_session": 2,
        "python": platform.python_version(),
        "cpus": len(os.sched_getaffinity(0)),
    }
    return publish(figures, RESULTS)


if __name__ == "__main__":
    raise SystemExit(main())
