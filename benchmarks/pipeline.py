"""Telemetry pipeline throughput and latency on the running local stack (`make up`).

After a warm-up run, sends seeded readings (each run from devices of its own) through
the mesh to the `readings` queue, where the deployed job (Spark standalone, supervised)
consumes them, and measures when each reading became visible in `readings/` (the mtime
of the Parquet file holding it) against when it was due to be sent: its timestamp (the
readings are stamped from a second ahead, time for the sender to connect, and each is sent
when the clock reaches its stamp). The latency splits at `received_time`, when the job's
source read the reading: `queued` (the sender, the mesh, the broker, and the wait for the
next micro-batch) and `in_spark` (the micro-batch, to the file). Then, as the ceiling,
Spark in local mode runs the same per-batch processing over the same kind of readings from
JSON files. Prints the figures and writes benchmarks/results/pipeline.json (with other
rates, seconds or devices: pipeline-r<rates>-s<seconds>-d<devices>.json, so that a
scaling run does not overwrite the standard one).

    .venv/bin/python benchmarks/pipeline.py [--rates 100 400 700] [--seconds 30] [--wait 120]
        [--devices 20]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds  # type: ignore[import-untyped]

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "spark"))

from enmesh.deploy.smoke import Stack  # noqa: E402
from enmesh_spark.simulator import Reading, generate, send  # noqa: E402

OUTPUT = Path("/var/lib/enmesh/telemetry/readings")
RESULTS = ROOT / "benchmarks" / "results"
DEFAULT_RATES, DEFAULT_SECONDS, DEFAULT_DEVICES = [100.0, 400.0, 700.0], 30.0, 20
# The first reading is stamped this far ahead: the sender connects (TLS, SASL) before it
# is due. Stamped at the start, the first readings went out 0.3 s late, all of them
# after: the sender paced from its connection, and the job was charged for the wait.
SEND_LEAD_SECONDS = 1.0


def _local_stack() -> Stack:
    build = ROOT / "build" / "local"
    endpoints = json.loads((build / "endpoints.json").read_text())
    deployment = json.loads((build / "deploy.json").read_text())
    return Stack(deployment, build, Path(endpoints["secrets"]), Path(endpoints["ca"]))


class _Visibility:
    """id -> (when the job's source read it, mtime of the Parquet file that holds it: when
    the row became readable). Each poll reads only the files it has not read before: it
    must not compete with the job."""

    def __init__(self, table: Path, wanted: set[str]) -> None:
        self.table, self.wanted = table, wanted
        self.at: dict[str, tuple[float, float]] = {}
        self.read: set[str] = set()

    def poll(self) -> dict[str, tuple[float, float]]:
        if not self.table.exists():
            return self.at
        dataset = ds.dataset(self.table, format="parquet", partitioning="hive")
        for fragment in dataset.get_fragments():
            if fragment.path in self.read:
                continue
            self.read.add(fragment.path)
            rows = fragment.to_table(columns=["id", "received_time"]).to_pylist()
            mtime = Path(fragment.path).stat().st_mtime
            self.at.update(
                {r["id"]: (r["received_time"].timestamp(), mtime)
                 for r in rows if r["id"] in self.wanted}
            )  # fmt: skip
        return self.at


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def _spread(seconds: list[float]) -> dict[str, float | None]:
    if not seconds:
        return {"p50_s": None, "p99_s": None, "max_s": None}
    return {
        "p50_s": round(statistics.median(seconds), 3),
        "p99_s": round(_percentile(seconds, 0.99), 3),
        "max_s": round(max(seconds), 3),
    }


def _summary(
    readings: list[Reading], visible: dict[str, tuple[float, float]], began: float
) -> dict[str, Any]:
    due = {r.id: r.ts_ms / 1000 for r in readings if r.id in visible}
    done = max((stored for _, stored in visible.values()), default=began)
    return {
        "readings": len(readings),
        "stored": len(visible),
        "events_per_s": round(len(visible) / max(done - began, 1e-9), 1),
        **_spread([visible[i][1] - due[i] for i in due]),
        "queued": _spread([visible[i][0] - due[i] for i in due]),
        "in_spark": _spread([visible[i][1] - visible[i][0] for i in due]),
    }


def through_mesh(
    stack: Stack, rate: float, seconds: float, seed: int, *, wait: float, devices: int = 20
) -> dict[str, Any]:
    began = time.time() + SEND_LEAD_SECONDS
    # Devices of the run's own: a device of another run (another seed) has another
    # baseline, and its readings would open with a burst of anomalies.
    readings = generate(
        seed=seed, devices=devices, rate=rate, duration=seconds, start_ms=int(began * 1000),
        device_prefix=f"bench{seed}",
    )  # fmt: skip
    accepted = send(
        readings, url=stack.urls[0], address="readings", user="device@iot",
        password=stack.password("device@iot"), ca=str(stack.ca), rate=rate, at_timestamps=True,
    )["accepted"]  # fmt: skip
    wanted = {r.id for r in readings}
    deadline = time.time() + wait
    visibility = _Visibility(OUTPUT, wanted)
    visible = visibility.poll()
    while len(visible) < len(wanted) and time.time() < deadline:
        time.sleep(1)  # polling the output for the stragglers, not a readiness wait
        visible = visibility.poll()
    return {"rate": rate, "devices": devices, "seconds": seconds, "accepted": accepted} | _summary(
        readings, visible, began
    )


def from_files(stack: Stack, readings: list[Reading]) -> dict[str, Any]:
    """Spark (local[2]) running the job's per-batch processing over the readings as files:
    the same work without the mesh, the ceiling for the pipeline."""
    work = Path(tempfile.mkdtemp(prefix="enmesh-bench-"))
    try:
        (work / "in").mkdir()
        for part in range(0, len(readings), 2000):
            lines = [
                json.dumps({"id": r.id, "body": r.body, "address": "readings"})
                for r in readings[part : part + 2000]
            ]
            (work / "in" / f"{part:08d}.json").write_text("\n".join(lines))
        secret = next(s for s in stack.deployment["secrets"] if s["name"] == "iot-backend")
        password_file = stack.secrets_dir / secret["name"] / secret["key"]
        sink = {"url": stack.urls[0], "user": "backend@iot", "caFile": str(stack.ca),
                "passwordFile": str(password_file)}  # fmt: skip
        command = [sys.executable, str(Path(__file__).with_name("pipeline_files.py")),
                   str(work / "in"), str(work / "out"), json.dumps(sink)]  # fmt: skip
        env = os.environ | {"PYTHONPATH": f"{ROOT}:{ROOT / 'spark'}"}
        result = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
        return dict(json.loads(result.stdout.strip().splitlines()[-1]))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _results_path(rates: list[float], seconds: float, devices: int) -> Path:
    if (rates, seconds, devices) == (DEFAULT_RATES, DEFAULT_SECONDS, DEFAULT_DEVICES):
        return RESULTS / "pipeline.json"
    named = "_".join(f"{rate:g}" for rate in rates)
    return RESULTS / f"pipeline-r{named}-s{seconds:g}-d{devices}.json"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", type=float, nargs="+", default=DEFAULT_RATES)
    parser.add_argument("--seconds", type=float, default=DEFAULT_SECONDS)
    parser.add_argument("--wait", type=float, default=120.0, help="seconds to wait for output")
    parser.add_argument(
        "--devices",
        type=int,
        default=DEFAULT_DEVICES,
        help="devices sending (a batch's time follows them)",
    )
    args = parser.parse_args()
    stack = _local_stack()
    # A job started moments ago spends its first batch with data starting Python workers
    # and opening state stores (about 30 s), and its next thousands of rows compiling:
    # measure the running service, not that.
    warm_up = through_mesh(stack, 100.0, 30.0, 99, wait=args.wait)
    if warm_up["stored"] < warm_up["readings"]:
        raise SystemExit(f"the job did not store the warm-up readings: {json.dumps(warm_up)}")
    print(f"warm-up: {json.dumps(warm_up)}", flush=True)
    runs = [
        through_mesh(stack, rate, args.seconds, seed, wait=args.wait, devices=args.devices)
        for seed, rate in enumerate(args.rates, start=100)
    ]
    for run in runs:
        print(f"mesh -> Spark at {run['rate']:g}/s: {json.dumps(run)}", flush=True)
    ceiling_readings = generate(seed=7, devices=20, rate=400, duration=args.seconds)
    ceiling = from_files(stack, ceiling_readings)
    print(f"files -> Spark (ceiling): {json.dumps(ceiling)}")
    results = {
        "mesh": runs,
        "warm_up": warm_up,
        "files_ceiling": ceiling,
        "target": "keep up with the mesh's anycast rate with p99 < 3 s",
        "cpus": os.cpu_count(),
    }
    path = _results_path(args.rates, args.seconds, args.devices)
    path.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
