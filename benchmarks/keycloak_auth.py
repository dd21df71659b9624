"""Keycloak in the authentication path: its start time and memory, and the rate and
latency of authenticated connection set-up through enmesh-router -> enmesh-auth ->
Keycloak. Target (issue 26): >= 200 authenticated connections/s per router. Four ways
in, interleaved round by round (medians): PLAIN with enmesh-auth asking Keycloak for a
password grant on every connection; PLAIN with enmesh-auth remembering logins (a grant
once, then admin-API lookups; enmesh.auth.verdicts); SCRAM-SHA-256 with the keys from
Keycloak's enmesh-scram resource (enmesh.auth.scram); and a router checking its own
sasldb (SCRAM-SHA-256).
Writes benchmarks/results/keycloak_auth.json.

    .venv/bin/python benchmarks/keycloak_auth.py [--connections 60] [--parallel 8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from proton.utils import BlockingConnection  # noqa: E402

from enmesh.auth.realm import realm_json  # noqa: E402
from enmesh.model.model import load_model  # noqa: E402
from tests.auth.conftest import (  # noqa: E402
    LOOKUP_SECRET,
    MODEL,
    PASSWORDS,
    ROUTER_BIN,
    auth_service_process,
    router_config,
)
from tests.router.conftest import account  # noqa: E402
from tests.support.keycloak import Keycloak, start_keycloak  # noqa: E402
from tests.support.mesh import build_mesh, wait_until  # noqa: E402
from tests.support.pki import Pki, make_pki  # noqa: E402
from tests.support.ports import free_port, port_is_listening  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "keycloak_auth.json"
TARGET_PER_S = 200


def connect_once(port: int, mechanism: str = "PLAIN") -> float:
    started = time.monotonic()
    BlockingConnection(
        f"amqp://127.0.0.1:{port}",
        timeout=30,
        user="alice@shop",
        password=PASSWORDS["shop-alice"],
        virtual_host="shop",
        allowed_mechs=mechanism,
        allow_insecure_mechs=True,
    ).close()
    return time.monotonic() - started


def connect_scram(port: int) -> float:
    return connect_once(port, "SCRAM-SHA-256")


def rate(port: int, count: int, parallel: int, connect: Any = connect_once) -> dict[str, float]:
    started = time.monotonic()
    with ThreadPoolExecutor(parallel) as pool:
        latencies = sorted(pool.map(lambda _: connect(port), range(count)))
    elapsed = time.monotonic() - started
    return {
        "connections": count,
        "parallel": parallel,
        "per_s": round(count / elapsed, 1),
        "p50_ms": round(statistics.median(latencies) * 1000, 1),
        "p99_ms": round(latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000, 1),
    }


@contextlib.contextmanager
def sasldb_router() -> Iterator[Callable[[int], float]]:
    """A router checking its Cyrus sasldb (SCRAM-SHA-256): the same measure's baseline."""
    work = Path(tempfile.mkdtemp(prefix="enmesh-sasldb-bench-"))
    mesh = build_mesh(work, routers=1)
    mesh.start()
    try:
        user = account(mesh, 0, "device@iot")

        def connect(_: int) -> float:
            started = time.monotonic()
            user.blocking(timeout=30).close()
            return time.monotonic() - started

        yield connect
    finally:
        mesh.stop()
        shutil.rmtree(work, ignore_errors=True)


def keycloak_router(
    work: Path, keycloak: Keycloak, pki: Pki, remember: bool, processes: list[Any]
) -> tuple[int, int]:
    """enmesh-auth (remembering logins and offering SCRAM, or not) and a router in front
    of it; its PLAIN and its SCRAM-only listener's ports."""
    directory = work / ("remembering" if remember else "grant-each-time")
    directory.mkdir()
    auth, auth_port = auth_service_process(keycloak, pki, directory / "enmesh-auth.log", remember)
    processes.append(auth)
    ports = (free_port(), free_port(), free_port(), free_port())
    config = router_config(directory, pki, auth_port, ports)
    with (directory / "router.log").open("w") as log:
        processes.append(
            subprocess.Popen(
                [str(ROUTER_BIN), "--config", str(config)], stdout=log, stderr=log, text=True
            )
        )
    wait_until(lambda: port_is_listening(ports[0]), 20, "the router")
    connect_once(ports[0])  # warm-up: Keycloak compiles its login path on first use
    if remember:
        connect_scram(ports[3])
    return ports[0], ports[3]


def median_of(runs: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--connections", type=int, default=60)
    parser.add_argument("--parallel", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (medians)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="enmesh-kc-bench-"))
    pki = make_pki(work / "pki", ["keycloak", "auth", "router"], key_type="rsa")
    keycloak = start_keycloak(work, pki.cert("keycloak"), pki.key("keycloak"), pki.ca_cert)
    processes: list[subprocess.Popen[str]] = []
    try:
        rss_started = keycloak.rss_kib()
        realm = realm_json(load_model([MODEL]), PASSWORDS, LOOKUP_SECRET)
        keycloak.admin("POST", "", json.loads(realm))
        grant_port, _ = keycloak_router(work, keycloak, pki, False, processes)
        remembered_port, scram_port = keycloak_router(work, keycloak, pki, True, processes)
        with sasldb_router() as sasldb_connect:
            sasldb_connect(0)
            variants: list[tuple[str, int, Callable[[int], float]]] = [
                ("grant_each_time", grant_port, connect_once),
                ("remembered", remembered_port, connect_once),
                ("scram_keycloak", scram_port, connect_scram),
                ("sasldb", 0, sasldb_connect),
            ]
            runs: dict[str, dict[str, list[dict[str, float]]]] = {}
            for _ in range(args.rounds):  # interleaved: each variant once per round
                for name, port, connect in variants:
                    variant = runs.setdefault(name, {"sequential": [], "concurrent": []})
                    variant["sequential"].append(rate(port, args.connections, 1, connect))
                    variant["concurrent"].append(
                        rate(port, args.connections, args.parallel, connect)
                    )
        figures: dict[str, Any] = {
            "keycloak_version": keycloak.home.name,
            "keycloak_start_s": round(keycloak.started_in, 1),
            "keycloak_rss_mb_started": round(rss_started / 1024),
            "keycloak_rss_mb_after": round(keycloak.rss_kib() / 1024),
            "rounds": args.rounds,
            **{
                name: {shape: median_of(values) for shape, values in variant.items()}
                for name, variant in runs.items()
            },
            "target_per_s": TARGET_PER_S,
            "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} cores",
        }
    finally:
        for process in processes:
            process.terminate()
            process.wait(10)
        keycloak.stop()
        keycloak.database.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(figures, indent=2))
    RESULTS.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
