"""The site's telemetry pipeline: a Spark master and the job's driver on one host, a
worker on each of two hosts, the job's checkpoint on the site's shared storage; the host
of a worker powered off while readings flow, without a reading lost or stored twice."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq  # type: ignore[import-untyped]

from enmesh.deploy.smoke import Stack
from enmesh_spark.simulator import generate, send
from tests.sites.clients import SENDER, router_metrics, router_url
from tests.support.mesh import samples, wait_until
from tests.support.sites import SiteSpec
from tests.support.sites.site import power_off, power_on

MASTER_UNITS = ("enmesh-spark-master", "enmesh-spark-worker", "enmesh-telemetry")
WORKER_UNITS = ("enmesh-spark-worker",)
MASTER_UI_PORT = 8180  # the spark role's enmesh_spark_master_ui_port
RATE, SECONDS = 50, 40  # readings per second, and for how long
STORED_BEFORE_CUT = 300


def _master_state(address: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://{address}:{MASTER_UI_PORT}/json/", timeout=10) as got:
        state: dict[str, Any] = json.load(got)
    return state


def _alive_workers(address: str) -> dict[str, dict[str, Any]]:
    workers = _master_state(address)["workers"]
    return {w["host"]: w for w in workers if w["state"] == "ALIVE"}


def _job_diagnosis(host: Any, master: str) -> str:
    """What the master and the job's log say: for a failure's message."""
    try:
        state = _master_state(master)
        workers = [(w["host"], w["state"], w["coresused"]) for w in state["workers"]]
        apps = [(a["name"], a["state"], a["cores"]) for a in state["activeapps"]]
    except OSError as error:
        workers, apps = [], [f"master unreadable: {error}"]
    log = host.run(
        "journalctl -u enmesh-telemetry --since -15min --no-pager -o cat"
        " | grep -E 'ERROR|WARN|Exception|stored|Started|exited' | grep -v '^[[:space:]]*at '"
        " | tail -40"
    ).stdout
    return f"master: workers {workers}, applications {apps}\njob's log (last lines):\n{log}"


def _jobs_router(host: Any, deployment: dict[str, Any]) -> dict[str, Any] | None:
    """The router the job's consumer is connected to (its one connection to an amqps
    port, seen from the job's host); None while it has none (or more than one)."""
    ports = {r["ports"]["amqps"] for r in deployment["routers"]}
    peers = set()
    for port in ports:
        out = host.check_output(f"ss -Htn state established '( dport = :{port} )'")
        peers |= {line.split()[-1].rsplit(":", 1)[0] for line in out.splitlines() if line}
    routers = [r for r in deployment["routers"] if r["host"] in peers]
    return routers[0] if len(routers) == 1 else None


def _router_outcomes(deployment: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Per router, how many of the deliveries it sent came back released, modified or
    rejected (its /metrics): for a failure's message."""
    counts: dict[str, dict[str, int]] = {}
    for router in deployment["routers"]:
        try:
            text = router_metrics(router)
        except OSError:
            continue
        counts[router["id"]] = {
            outcome: sum(n for _, n in samples(text, f"enmesh_router_deliveries_{outcome}_total"))
            for outcome in ("released", "modified", "rejected")
        }
    return counts


def _outcomes_since(before: dict[str, dict[str, int]], deployment: dict[str, Any]) -> str:
    changes = {
        router: {k: n - before.get(router, {}).get(k, 0) for k, n in now.items()}
        for router, now in _router_outcomes(deployment).items()
    }
    return str({router: {k: n for k, n in c.items() if n} for router, c in changes.items()})


def _stored_ids(site: SiteSpec, prefix: str) -> list[str]:
    """Reading ids of these devices in the job's Parquet output (on the shared storage,
    seen here from the machine's side)."""
    table = site.shared / "telemetry" / "readings"
    if not any(table.glob("date=*/*.parquet")):
        return []
    ids = pq.read_table(table, columns=["id"]).column("id").to_pylist()
    return [i for i in ids if i.startswith(prefix)]


class _Progress:
    """How many readings are stored, polled: the longest time the count stood still."""

    def __init__(self, since: float) -> None:
        self.count, self.changed_at, self.longest_stall = -1, since, 0.0

    def saw(self, count: int) -> int:
        now = time.monotonic()
        self.longest_stall = max(self.longest_stall, now - self.changed_at)
        if count != self.count:
            self.count, self.changed_at = count, now
        return count


def test_the_master_host_runs_the_master_and_the_job_and_every_spark_host_a_worker(
    spark_hosts: dict[str, Any], spark_master: str
) -> None:
    for address, host in spark_hosts.items():
        wanted = MASTER_UNITS if address == spark_master else WORKER_UNITS
        for unit in MASTER_UNITS:
            service = host.service(unit)
            if unit in wanted:
                assert service.is_enabled and service.is_running, f"{address}: {unit}"
            else:
                assert not service.is_running, f"{address} runs {unit}"
    state = _master_state(spark_master)
    assert set(_alive_workers(spark_master)) == set(spark_hosts)
    jobs = {app["name"]: app["state"] for app in state["activeapps"]}
    assert jobs.get("enmesh-telemetry") == "RUNNING", jobs


def test_a_worker_host_powered_off_under_readings_loses_none_and_stores_none_twice(
    stack: Stack,
    deployment: dict[str, Any],
    site: SiteSpec,
    spark_hosts: dict[str, Any],
    spark_master: str,
) -> None:
    victim = next(h for h in site.host_list() if h.address in set(spark_hosts) - {spark_master})
    # The job's executors are spread over the workers: the victim's holds some of its tasks.
    busy = {host: w["coresused"] for host, w in _alive_workers(spark_master).items()}
    assert busy.get(victim.address, 0) >= 1, f"no executor on {victim.address}: {busy}"

    began = int(time.time() * 1000)
    prefix = f"site{began}"
    readings = generate(
        seed=23, devices=4, rate=RATE, duration=SECONDS, start_ms=began, device_prefix=prefix
    )
    outcomes: list[dict[str, int]] = []

    def produce() -> None:
        url = router_url(deployment, deployment["routers"][0]["host"])
        password = stack.password(SENDER)
        outcomes.append(
            send(
                readings,
                url=url,
                address="readings",
                user=SENDER,
                password=password,
                ca=str(stack.ca),
                rate=RATE,
            )
        )

    sending = threading.Thread(target=produce, name="site-readings", daemon=True)
    sending.start()
    try:
        wait_until(
            lambda: len(_stored_ids(site, prefix)) >= STORED_BEFORE_CUT,
            180,
            f"{STORED_BEFORE_CUT} readings stored before the cut",
            interval=0.5,
        )
        cut_at = time.monotonic()
        before = _router_outcomes(deployment)
        power_off(site, victim)
        sending.join(SECONDS + 120)
        accepted = [sent["accepted"] for sent in outcomes]
        assert accepted == [len(readings)], (
            f"the mesh accepted {accepted} of {len(readings)}: {outcomes}; outcomes the "
            f"routers were given since the cut: {_outcomes_since(before, deployment)}"
        )
        wanted = {r.id for r in readings}
        progress = _Progress(cut_at)
        try:
            wait_until(
                lambda: progress.saw(len(wanted & set(_stored_ids(site, prefix)))) == len(wanted),
                420,
                "every reading stored by the remaining worker",
                interval=1,
            )
        except TimeoutError as timeout:
            missing = wanted - set(_stored_ids(site, prefix))
            raise AssertionError(
                f"{timeout}: {len(missing)} of {len(wanted)} missing, e.g. {sorted(missing)[:3]}"
                f"\n{_job_diagnosis(spark_hosts[spark_master], spark_master)}"
            ) from None
        recovered = time.monotonic() - cut_at
    finally:
        power_on(site, victim)
    stored = _stored_ids(site, prefix)
    assert len(stored) == len(set(stored)) == len(readings), (
        f"{len(stored)} stored for {len(readings)} readings: "
        f"{len(stored) - len(set(stored))} stored twice"
    )
    print(
        f"worker host {victim.address} powered off after {STORED_BEFORE_CUT} readings stored: "
        f"{len(readings)} readings, every one stored once; the output stood still for "
        f"{progress.longest_stall:.1f} s at most after the cut; the last stored "
        f"{recovered:.1f} s after the cut (sending went on meanwhile)"
    )
    # Its unit starts the worker at boot; the master has it back with no manual step.
    wait_until(
        lambda: victim.address in _alive_workers(spark_master),
        180,
        f"the worker on {victim.address} registering again",
        interval=1,
    )


def test_the_job_moves_to_another_router_when_its_router_falls_silent(
    *,
    stack: Stack,
    deployment: dict[str, Any],
    hosts: dict[str, Any],
    site: SiteSpec,
    spark_hosts: dict[str, Any],
    spark_master: str,
) -> None:
    """The job's `--url` lists every router. The one it is connected to stopped
    (SIGSTOP: as silent as a host that lost power, but the broker node beside it keeps
    running): the job hears nothing for its heartbeat time, ends, and its restart passes
    over the silent router to another, where it stores what is sent next."""
    job_host = spark_hosts[spark_master]
    silent = _jobs_router(job_host, deployment)
    assert silent is not None, "the job has no connection to one router"
    unit = f"enmesh-router-{silent['id']}"
    hosts[silent["host"]].run_expect([0], f"systemctl kill --signal=SIGSTOP {unit}")
    stopped_at = time.monotonic()
    try:
        moved: list[dict[str, Any] | None] = []

        def left() -> bool:
            moved.append(_jobs_router(job_host, deployment))
            return moved[-1] not in (None, silent)

        wait_until(
            left,
            180,
            f"the job to leave the silent router on {silent['host']}",
            interval=1,
        )
        moved_after = time.monotonic() - stopped_at
    finally:
        # Resumed, it finds its client gone and gives back to the broker what it holds for
        # it. (A broker node keeps what it sent to the silent router's links until it drops
        # that connection: minutes, see docs/sites.md; the readings wait until then.)
        hosts[silent["host"]].run_expect([0], f"systemctl kill --signal=SIGCONT {unit}")
    began = int(time.time() * 1000)
    prefix = f"moved{began}"
    readings = generate(
        seed=27, devices=2, rate=RATE, duration=4, start_ms=began, device_prefix=prefix
    )
    now = moved[-1]
    assert now is not None
    other = next(r for r in deployment["routers"] if r is not silent)
    outcomes = send(
        readings,
        url=router_url(deployment, other["host"]),
        address="readings",
        user=SENDER,
        password=stack.password(SENDER),
        ca=str(stack.ca),
    )
    assert outcomes["accepted"] == len(readings), outcomes
    wanted = {r.id for r in readings}
    try:
        wait_until(
            lambda: wanted <= set(_stored_ids(site, prefix)),
            180,
            f"the readings stored by the job on {now['host']}",
            interval=1,
        )
    except TimeoutError as timeout:
        raise AssertionError(f"{timeout}\n{_job_diagnosis(job_host, spark_master)}") from None
    stored = _stored_ids(site, prefix)
    assert len(stored) == len(set(stored)) == len(readings)
    print(
        f"the job's router on {silent['host']} stopped: the job was on {now['host']} "
        f"{moved_after:.1f} s later; {len(readings)} readings then sent, every one stored once"
    )


def test_the_job_keeps_its_checkpoint_on_the_shared_storage(
    spark_hosts: dict[str, Any], site: SiteSpec
) -> None:
    """Executors on every worker wrote the state of their partitions where the others
    can read it back: each state partition's files are on the shared storage."""
    state = site.shared / "telemetry" / "_checkpoint" / "state"
    partitions = sorted(p for p in state.glob("*/*") if p.is_dir() and p.name.isdigit())
    assert partitions, f"no state partitions under {state}"
    for partition in partitions:
        assert any(f.is_file() for f in Path(partition).rglob("*")), f"{partition} is empty"
