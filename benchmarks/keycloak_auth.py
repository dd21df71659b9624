"""Keycloak in the authentication path: its start time and memory, and the rate and
latency of authenticated connection set-up through enmesh-router -> enmesh-auth ->
Keycloak (password grant). Target (issue 26): >= 200 authenticated connections/s per
router. Writes benchmarks/results/keycloak_auth.json.

    .venv/bin/python benchmarks/keycloak_auth.py [--connections 100] [--parallel 8]
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from proton.utils import BlockingConnection  # noqa: E402

from enmesh.auth.realm import realm_json  # noqa: E402
from enmesh.model.model import load_model  # noqa: E402
from tests.auth.conftest import (  # noqa: E402
    MODEL,
    PASSWORDS,
    ROUTER_BIN,
    auth_service_process,
    router_config,
)
from tests.router.conftest import account  # noqa: E402
from tests.support.keycloak import start_keycloak  # noqa: E402
from tests.support.mesh import build_mesh, wait_until  # noqa: E402
from tests.support.pki import make_pki  # noqa: E402
from tests.support.ports import free_port, port_is_listening  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "keycloak_auth.json"
TARGET_PER_S = 200


def connect_once(port: int) -> float:
    started = time.monotonic()
    BlockingConnection(
        f"amqp://127.0.0.1:{port}",
        timeout=30,
        user="alice@shop",
        password=PASSWORDS["shop-alice"],
        virtual_host="shop",
        allowed_mechs="PLAIN",
        allow_insecure_mechs=True,
    ).close()
    return time.monotonic() - started


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


def sasldb(count: int, parallel: int) -> dict[str, dict[str, float]]:
    """The same measure against a router checking its Cyrus sasldb (SCRAM-SHA-256)."""
    work = Path(tempfile.mkdtemp(prefix="enmesh-sasldb-bench-"))
    mesh = build_mesh(work, routers=1)
    mesh.start()
    try:
        user = account(mesh, 0, "device@iot")

        def connect(_: int) -> float:
            started = time.monotonic()
            user.blocking(timeout=30).close()
            return time.monotonic() - started

        connect(0)
        return {
            "sequential": rate(0, count, 1, connect),
            "concurrent": rate(0, count, parallel, connect),
        }
    finally:
        mesh.stop()
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--connections", type=int, default=100)
    parser.add_argument("--parallel", type=int, default=8)
    parser.add_argument("--sasldb-only", action="store_true", help="only the sasldb side")
    args = parser.parse_args()
    if args.sasldb_only:
        figures = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
        figures["sasldb"] = sasldb(args.connections, args.parallel)
        print(json.dumps(figures["sasldb"], indent=2))
        RESULTS.write_text(json.dumps(figures, indent=2) + "\n")
        return
    work = Path(tempfile.mkdtemp(prefix="enmesh-kc-bench-"))
    pki = make_pki(work / "pki", ["keycloak", "auth", "router"], key_type="rsa")
    keycloak = start_keycloak(work, pki.cert("keycloak"), pki.key("keycloak"), pki.ca_cert)
    processes: list[subprocess.Popen[str]] = []
    try:
        rss_started = keycloak.rss_kib()
        keycloak.admin("POST", "", json.loads(realm_json(load_model([MODEL]), PASSWORDS)))
        auth, auth_port = auth_service_process(keycloak, pki, work / "enmesh-auth.log")
        processes.append(auth)
        ports = (free_port(), free_port(), free_port())
        config = router_config(work, pki, auth_port, ports)
        with (work / "router.log").open("w") as log:
            processes.append(
                subprocess.Popen(
                    [str(ROUTER_BIN), "--config", str(config)], stdout=log, stderr=log, text=True
                )
            )
        wait_until(lambda: port_is_listening(ports[0]), 20, "the router")
        connect_once(ports[0])  # warm-up: Keycloak compiles its login path on first use
        sequential = rate(ports[0], args.connections, 1)
        concurrent = rate(ports[0], args.connections, args.parallel)
        figures = {
            "keycloak_version": keycloak.home.name,
            "keycloak_start_s": round(keycloak.started_in, 1),
            "keycloak_rss_mb_started": round(rss_started / 1024),
            "keycloak_rss_mb_after": round(keycloak.rss_kib() / 1024),
            "sequential": sequential,
            "concurrent": concurrent,
            "target_per_s": TARGET_PER_S,
            "machine": f"{platform.machine()}, {len(__import__('os').sched_getaffinity(0))} cores",
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
