"""The ceiling run of benchmarks/pipeline.py: the job's per-batch processing over JSON files.

python benchmarks/pipeline_files.py IN_DIR OUT_DIR SINK_JSON   # prints one JSON line of figures

SINK_JSON: the `amqp` options alerts and commands go to (the local stack's).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds  # type: ignore[import-untyped]
from pyspark.sql import functions as F  # noqa: N812

from enmesh_spark import telemetry


def _stored(out: Path) -> int:
    """Rows in the readings and quarantine tables: every record lands in one of them."""
    tables = [out / name for name in ("readings", "quarantine") if (out / name).exists()]
    return sum(ds.dataset(t, format="parquet", partitioning="hive").count_rows() for t in tables)


def _phases(progress: list[dict[str, Any]]) -> dict[str, int]:
    """Mean milliseconds per batch in each of Spark's trigger phases (addBatch: the plan
    and the sink; walCommit and commitOffsets: the checkpoint)."""
    if not progress:
        return {}
    phases = sorted({name for p in progress for name in p["durationMs"]})
    return {
        name: round(statistics.fmean(p["durationMs"].get(name, 0) for p in progress))
        for name in phases
    }


def main(source: Path, out: Path, sink: dict[str, str]) -> int:
    spark = telemetry.session("enmesh-pipeline-files", "local[2]")
    config = telemetry.JobConfig(out=out, source={}, sink=sink)
    total = sum(1 for f in source.iterdir() for _ in f.open())
    messages = (
        spark.readStream.schema("id string, body string, address string")
        .option("maxFilesPerTrigger", 1)
        .json(str(source))
        .withColumn("received_time", F.current_timestamp())
    )
    began = time.monotonic()
    query = telemetry.start(spark, config, None, messages)
    # A streaming query runs until stopped: stop it once every record is stored, counted
    # after each new batch only (awaitTermination raises if the query failed).
    counted_batch = None
    while True:
        query.awaitTermination(0.2)
        last = query.lastProgress
        if last is None or last["batchId"] == counted_batch:
            continue
        counted_batch = last["batchId"]
        if _stored(out) >= total:
            break
    seconds = time.monotonic() - began
    query.stop()
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    spark.stop()
    # the first batch pays for the JVM's warm-up: the steady rate leaves it out
    warm = progress[1:]
    warm_rows = sum(p["numInputRows"] for p in warm)
    warm_seconds = sum(p["durationMs"]["triggerExecution"] for p in warm) / 1000
    print(json.dumps({
        "readings": total, "seconds": round(seconds, 2), "batches": len(progress),
        "events_per_s": round(total / seconds, 1),
        "steady_events_per_s": round(warm_rows / warm_seconds, 1) if warm else None,
        "steady_batch_seconds": round(warm_seconds / len(warm), 2) if warm else None,
        "steady_batch_phases_ms": _phases(warm),
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3])))
