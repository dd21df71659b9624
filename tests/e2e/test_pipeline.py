"""The deployed telemetry pipeline: Spark master, worker and job under supervisord, bound
to loopback, turning readings sent through the mesh into Parquet."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq  # type: ignore[import-untyped]

from enmesh.deploy.smoke import Stack
from enmesh_spark.simulator import generate, send
from tests.e2e.installs import started_after_install
from tests.support.mesh import wait_until

PROGRAMS = ("enmesh-spark-master", "enmesh-spark-worker", "enmesh-telemetry")
OUTPUT = Path("/var/lib/enmesh/telemetry")  # the spark role's enmesh_spark_output_dir
WORK = Path("/var/lib/enmesh/spark/work")  # the worker's --work-dir: an executor log per app


def test_spark_and_the_job_run_under_supervisord(host: Any) -> None:
    for name in PROGRAMS:
        program = host.supervisor(name)
        assert program.is_running, f"{name}: {program.status}"


def test_the_job_runs_the_installed_enmesh(host: Any) -> None:
    """The job imports enmesh_spark once: it must have started after the current install
    (on a host with routers, enmesh is installed by another play than the job's)."""
    pid = host.supervisor("enmesh-telemetry").pid
    assert started_after_install(host, pid), "the job runs an older enmesh install"


def _local_address(column: str) -> tuple[str, str]:
    """`[::ffff:127.0.0.1]:7077` (an IPv4-mapped Java socket) -> ("127.0.0.1", "7077")."""
    host, port = column.rsplit(":", 1)
    return host.strip("[]").removeprefix("::ffff:"), port


def test_spark_listens_only_on_loopback(host: Any) -> None:
    sockets = host.check_output("ss -ltnpH")
    java = [_local_address(line.split()[3]) for line in sockets.splitlines() if '"java"' in line]
    assert ("127.0.0.1", "7077") in java, sockets
    exposed = [f"{address}:{port}" for address, port in java if address != "127.0.0.1"]
    assert not exposed, f"Spark listening beyond loopback: {exposed}"


def _stored_ids() -> set[str]:
    table = OUTPUT / "readings"
    if not any(table.glob("date=*/*.parquet")):
        return set()
    return set(pq.read_table(table, columns=["id"]).column("id").to_pylist())


def test_readings_sent_through_the_mesh_land_in_parquet(stack: Stack) -> None:
    # Devices of their own: no stored baseline, so no anomaly (alerts and expired commands
    # would land in alerts::audit and dlq, and the smoke check would skip those stores).
    began = int(time.time() * 1000)
    readings = generate(
        seed=3, devices=3, rate=10, duration=3, start_ms=began, device_prefix=f"e2e{began}"
    )
    accepted = send(
        readings, url=stack.urls[-1], address="readings", user="device@iot",
        password=stack.password("device@iot"), ca=str(stack.ca),
    )["accepted"]  # fmt: skip
    assert accepted == len(readings)
    wanted = {r.id for r in readings}
    wait_until(lambda: wanted <= _stored_ids(), 240, "the job to store the readings")


def test_the_executor_logs_warnings_only(host: Any) -> None:
    """At INFO, each micro-batch wrote about 15 KB to the executor's log (an idle job runs
    a batch every 5 s), in a file nothing rolled. (After the readings above: batches ran.)"""
    # This PID namespace only: make test runs the site scenario beside this one, and root
    # sees its hosts' processes (systemd-nspawn gives each a PID namespace of its own),
    # their Spark executors among them.
    executors = "pgrep --ns $$ --nslist pid -f [C]oarseGrainedExecutorBackend"
    (pid,) = host.check_output(executors).split()
    assert "-Dlog4j2.configurationFile=file:" in Path(f"/proc/{pid}/cmdline").read_text()
    newest = max(WORK.glob("app-*/*/stderr"), key=lambda log: log.stat().st_mtime)
    info = [line for line in newest.read_text().splitlines() if " INFO " in line]
    assert not info, f"{newest}: {info[:3]}"
