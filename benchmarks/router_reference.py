"""enmesh-router side by side with a reference router (qdrouterd), interleaved.

`router_throughput.py --reference-router PATH` runs this after its own figures: the
three compiled router configs of its mesh are run in turn by enmesh-router and by the
binary at PATH (a qdrouterd 1.19 the user built; the project neither ships nor downloads
one), round after round, with the same clients and runs. Each round measures one hop
and three hops unsettled (throughput, and the routers' CPU seconds per message from
/proc: stable on a noisy machine where rates are not), then p50/p99 latency at a fixed
paced rate through one hop (and the routers' CPU per message there). The figures are
per round and their medians, with the ratios the issue's targets name (enmesh over the
reference).

PATH must start as it is (`PATH --config FILE`): a qdrouterd built against a proton
outside the system's library path needs LD_LIBRARY_PATH in the environment, or a
wrapper script that sets it.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from tests.support.amqp import Account
from tests.support.connect_load import cpu_seconds
from tests.support.mesh import Mesh, RouterProcess, wait_until


class Flow(Protocol):
    """Messages from sender to receiver, unsettled; `rate` paces them (None: as fast as
    credit allows); a receiver still short after `timeout` s reports what it got."""

    def __call__(
        self,
        sender: Account,
        receiver: Account,
        address: str,
        total: int,
        *,
        rate: float | None,
        timeout: float,
    ) -> dict[str, Any]: ...


ENMESH = "enmesh-router"
ADDRESS = "telemetry"  # the sample model's anycast address: direct, no broker
WARM_UP = 200  # messages across all three routers: the mesh knows the address
FLOW_TIMEOUT = 180.0


def engine_routers(mesh: Mesh, binary: Path | None) -> list[RouterProcess]:
    """The mesh's routers on their compiled configs, run by `binary` (None: enmesh-router)."""
    if binary is None:
        return list(mesh.routers)
    return [
        replace(r, binary=binary, admission=None, options=(), process=None) for r in mesh.routers
    ]


def reference_label(reference: Path) -> str:
    return reference.name if reference.name != ENMESH else f"{ENMESH} (reference)"


def _costed(mesh: Mesh, flow: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run `flow` and add the CPU the routers spent per message it carried."""
    pids = [r.process.pid for r in mesh.routers if r.process is not None]
    before = sum(cpu_seconds(pid) for pid in pids)
    result = flow()
    spent = sum(cpu_seconds(pid) for pid in pids) - before
    messages = max(1, int(result["messages"]))
    return {**result, "router_cpu_us_per_msg": round(spent / messages * 1e6, 2)}


def _round(mesh: Mesh, run: Flow, n: int, rate: float) -> dict[str, Any]:
    def account(router: int, identity: str) -> Account:
        return Account(mesh.url(router), identity, mesh.passwords[identity], "iot")

    # Every consumer is on router 2, so no flow's consumer is still known elsewhere when
    # the next starts: qdrouterd releases what it sent towards a consumer just gone.
    one_hop = (account(2, "device@iot"), account(2, "backend@iot"))
    three_hops = (account(0, "device@iot"), account(2, "backend@iot"))
    _ready(run, three_hops)
    paced = min(n, int(rate * 5))
    return {
        "one_hop": _costed(
            mesh, lambda: run(*one_hop, ADDRESS, n, rate=None, timeout=FLOW_TIMEOUT)
        ),
        "three_hops": _costed(
            mesh, lambda: run(*three_hops, ADDRESS, n, rate=None, timeout=FLOW_TIMEOUT)
        ),
        # At a fixed rate each message is a wake-up of its own: what a router spends per
        # wake-up, which batching hides at full speed, shows here.
        "paced": {
            "rate": rate,
            **_costed(mesh, lambda: run(*one_hop, ADDRESS, paced, rate=rate, timeout=FLOW_TIMEOUT)),
        },
    }


def _ready(run: Flow, path: tuple[Account, Account]) -> None:
    """Readiness by behaviour: short flows across the three routers until one arrives
    whole. enmesh-router gives a sender credit only once the consumer is reachable;
    qdrouterd gives it at once and releases what it cannot route yet."""

    def delivered() -> bool:
        try:
            return bool(run(*path, ADDRESS, WARM_UP, rate=None, timeout=3.0)["complete"])
        except RuntimeError:  # no credit within the timeout
            return False

    wait_until(delivered, 90, "a flow to cross the three routers")


def _medians(rounds: list[dict[str, Any]]) -> dict[str, float]:
    def median(path: str, key: str) -> float:
        return round(float(statistics.median(r[path][key] for r in rounds)), 2)

    return {
        "one_hop_msgs_per_s": median("one_hop", "msgs_per_s"),
        "three_hops_msgs_per_s": median("three_hops", "msgs_per_s"),
        "one_hop_router_cpu_us_per_msg": median("one_hop", "router_cpu_us_per_msg"),
        "three_hops_router_cpu_us_per_msg": median("three_hops", "router_cpu_us_per_msg"),
        "paced_p50_ms": median("paced", "p50_ms"),
        "paced_p99_ms": median("paced", "p99_ms"),
        "paced_router_cpu_us_per_msg": median("paced", "router_cpu_us_per_msg"),
    }


def _ratios(ours: dict[str, float], theirs: dict[str, float]) -> dict[str, float]:
    return {key: round(ours[key] / theirs[key], 2) for key in ours if theirs[key]}


def side_by_side(
    mesh: Mesh, reference: Path, run: Flow, *, n: int, runs: int, rate: float
) -> dict[str, Any]:
    """`runs` rounds, each engine in turn; the mesh's routers are left stopped."""
    reference = reference.absolute()
    label = reference_label(reference)
    engines = {ENMESH: engine_routers(mesh, None), label: engine_routers(mesh, reference)}
    rounds: dict[str, list[dict[str, Any]]] = {engine: [] for engine in engines}
    try:
        for index in range(runs):
            for engine, routers in engines.items():
                mesh.stop()
                mesh.routers = routers
                mesh.start()
                rounds[engine].append(_round(mesh, run, n, rate))
                print(f"round {index + 1} {engine}:", _medians(rounds[engine][-1:]), flush=True)
    finally:
        mesh.stop()
        mesh.routers = engines[ENMESH]
    medians = {engine: _medians(found) for engine, found in rounds.items()}
    ratios = _ratios(medians[ENMESH], medians[label])
    return {
        "reference": str(reference),
        "label": label,
        "runs": runs,
        "messages": n,
        "rounds": rounds,
        "medians": medians,
        "ratios_enmesh_over_reference": ratios,
        "targets": {
            "cpu_per_msg_le_2x": ratios["one_hop_router_cpu_us_per_msg"] <= 2,
            "one_hop_ge_90pct": ratios["one_hop_msgs_per_s"] >= 0.9,
            "three_hops_ge_90pct": ratios["three_hops_msgs_per_s"] >= 0.9,
            "paced_p99_le_1_2x": ratios["paced_p99_ms"] <= 1.2,
        },
    }
