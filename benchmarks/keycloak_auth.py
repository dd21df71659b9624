"""Keycloak in the authentication path: its start time and memory, and the rate, latency
and CPU cost of authenticated connection set-up through enmesh-router -> enmesh-auth ->
Keycloak. Target (issue 26): >= 200 authenticated connections/s per router. Four ways
in, interleaved round by round (medians): PLAIN over TLS with enmesh-auth asking Keycloak
for a password grant on every connection; PLAIN over TLS with enmesh-auth remembering
logins (a grant once, then admin-API lookups; enmesh.auth.verdicts); SCRAM-SHA-256 with
the keys from Keycloak's enmesh-scram resource (enmesh.auth.scram); and a router checking
its own sasldb (SCRAM-SHA-256), the baseline.

Each variant is measured twice: one connection at a time (latency without queueing) and
under load (tests.support.connect_load: client processes keeping handshakes in flight, so
the server side is the limit). Under load, the CPU each server process spends per
connection (router, enmesh-auth, Keycloak's JVM, from /proc) says what limits the rate:
on a machine with C cores the ceiling is about C / (their sum), and one process's share
can never exceed its own 1 / cost.
Writes benchmarks/results/keycloak_auth.json.

    .venv/bin/python benchmarks/keycloak_auth.py [--connections 400] [--rounds 3]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

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
from tests.support.amqp import Account  # noqa: E402
from tests.support.connect_load import churn, churn_costing  # noqa: E402
from tests.support.keycloak import Keycloak, start_keycloak  # noqa: E402
from tests.support.mesh import build_mesh, wait_until  # noqa: E402
from tests.support.pki import Pki, make_pki  # noqa: E402
from tests.support.ports import free_port, port_is_listening  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "keycloak_auth.json"
TARGET_PER_S = 200
CLIENT_PROCESSES = 2
IN_FLIGHT = 8  # handshakes each client process keeps going


@dataclass(frozen=True)
class Variant:
    name: str
    account: Account
    servers: dict[str, int]  # process name -> pid, whose CPU per connection is reported


def measure(variant: Variant, connections: int) -> dict[str, Any]:
    """The variant once sequentially (latency), then under load (rate and CPU)."""
    alone = churn(variant.account, max(connections // 10, 20), processes=1, concurrency=1)
    loaded, cpu = churn_costing(
        variant.account, connections, CLIENT_PROCESSES, IN_FLIGHT, list(variant.servers.values())
    )
    if loaded.errors:
        print(f"{variant.name}: {len(loaded.errors)} refused, e.g. {loaded.errors[0]}")
    return {
        "sequential_p50_ms": round(alone.p50_ms, 1),
        "sequential_p99_ms": round(alone.p99_ms, 1),
        **{f"loaded_{key}": value for key, value in loaded.summary().items()},
        **{
            f"cpu_ms_per_connection_{name}": round(seconds * 1000, 2)
            for name, seconds in zip(variant.servers, cpu, strict=True)
        },
    }


@contextlib.contextmanager
def sasldb_router() -> Iterator[Variant]:
    """A router checking its Cyrus sasldb (SCRAM-SHA-256): the same measure's baseline."""
    work = Path(tempfile.mkdtemp(prefix="enmesh-sasldb-bench-"))
    mesh = build_mesh(work, routers=1)
    mesh.start()
    try:
        router = mesh.routers[0].process
        assert router is not None
        yield Variant("sasldb", account(mesh, 0, "device@iot"), {"router": router.pid})
    finally:
        mesh.stop()
        shutil.rmtree(work, ignore_errors=True)


def keycloak_router(
    work: Path, keycloak: Keycloak, pki: Pki, remember: bool, processes: list[Any]
) -> list[Variant]:
    """enmesh-auth (remembering logins and offering SCRAM, or not) and a router in front
    of it: PLAIN over TLS through it, and (remembering) SCRAM on the SCRAM-only listener."""
    directory = work / ("remembering" if remember else "grant-each-time")
    directory.mkdir()
    auth, auth_port = auth_service_process(keycloak, pki, directory / "enmesh-auth.log", remember)
    processes.append(auth)
    ports = (free_port(), free_port(), free_port(), free_port())
    config = router_config(directory, pki, auth_port, ports)
    with (directory / "router.log").open("w") as log:
        router = subprocess.Popen(
            [str(ROUTER_BIN), "--config", str(config)], stdout=log, stderr=log, text=True
        )
    processes.append(router)
    wait_until(lambda: port_is_listening(ports[0]), 20, "the router")
    servers = {"router": router.pid, "enmesh_auth": auth.pid, "keycloak": keycloak.java_pid()}
    password = PASSWORDS["shop-alice"]
    plain = Account(f"amqps://127.0.0.1:{ports[2]}", "alice@shop", password, "shop", pki.ca_cert)
    plain = dataclasses.replace(plain, mechanisms="PLAIN")
    scram = Account(f"amqp://127.0.0.1:{ports[3]}", "alice@shop", password, "shop")
    variants = [Variant("remembered" if remember else "grant_each_time", plain, servers)]
    if remember:
        variants.append(Variant("scram_keycloak", scram, servers))
    for variant in variants:  # warm-up: Keycloak compiles its login path on first use
        churn(variant.account, 20, processes=1, concurrency=1)
    return variants


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--connections", type=int, default=400, help="per loaded run")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (medians)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="enmesh-kc-bench-"))
    hostnames = ("localhost", "127.0.0.1", "shop")  # clients check the space's name
    pki = make_pki(work / "pki", ["keycloak", "auth", "router"], hostnames, key_type="rsa")
    keycloak = start_keycloak(work, pki.cert("keycloak"), pki.key("keycloak"), pki.ca_cert)
    processes: list[subprocess.Popen[str]] = []
    try:
        rss_started = keycloak.rss_kib()
        realm = realm_json(load_model([MODEL]), PASSWORDS, LOOKUP_SECRET)
        keycloak.admin("POST", "", json.loads(realm))
        variants = keycloak_router(work, keycloak, pki, False, processes)
        variants += keycloak_router(work, keycloak, pki, True, processes)
        with sasldb_router() as baseline:
            variants.append(baseline)
            runs: dict[str, list[dict[str, Any]]] = {}
            for _ in range(args.rounds):  # interleaved: each variant once per round
                for variant in variants:
                    runs.setdefault(variant.name, []).append(measure(variant, args.connections))
        figures: dict[str, Any] = {
            "keycloak_version": keycloak.home.name,
            "keycloak_start_s": round(keycloak.started_in, 1),
            "keycloak_rss_mb_started": round(rss_started / 1024),
            "keycloak_rss_mb_after": round(keycloak.rss_kib() / 1024),
            "rounds": args.rounds,
            **{name: median_of(values) for name, values in runs.items()},
            "target_per_s": TARGET_PER_S,
            "client_processes": CLIENT_PROCESSES,
            "in_flight_per_client": IN_FLIGHT,
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
