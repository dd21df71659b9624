"""The telemetry job: AMQP -> readings, quarantine, windows, anomalies -> Parquet and AMQP.

The streaming plan:
1. parse JSON telemetry; a record that fails gets the reason (it goes to `quarantine/`);
2. per device (`device_state`, Spark's state, checkpointed with each batch): drop a
   message whose id was seen in the last `--dedupe-minutes` (a redelivery after a crash),
   score each reading against the device's rolling baseline (|z| > threshold is an
   anomaly), count it in its tumbling (1 min) and sliding (5 min every 1 min) windows,
   and emit the windows that closed.
Each micro-batch's output is collected once to the driver, which writes it as Parquet
(`publish`), then sends an alert to the `alerts` topic and a command with a TTL to the
`commands` queue per anomaly (message ids derive from the reading). Only then does
Spark commit the batch, and only then are the deliveries accepted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F  # noqa: N812

from enmesh_spark import publish, tables
from enmesh_spark.device_state import INPUT_COLUMNS, OUTPUT_SCHEMA, DeviceProcessor, Settings
from enmesh_spark.source import AmqpDataSource, send_rows

TELEMETRY_SCHEMA = "device string, ts long, metrics map<string,double>"
RAW_METRICS_SCHEMA = "metrics map<string,string>"
# Spark's state (the device step's) in RocksDB, checkpointed as a changelog per batch
SPARK_SETTINGS = {
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    ),
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    # The device step's processing-time timers would make Spark run a batch on every
    # trigger, data or not (about 2 s of work each on one core); the source's idle tick
    # (JobConfig.idle_tick_ms) runs the batches the timers need instead.
    "spark.sql.streaming.noDataMicroBatches.enabled": "false",
    # The checkpoint is a local directory. Spark's default manager (Hadoop's FileContext)
    # forks `readlink` (several per rename) and `chmod` (per file created) there, as Hadoop
    # has no native library here: the batch's checkpoint phases took about 115 ms, now
    # 30-50. Renames on a local file system are atomic, which this manager relies on.
    "spark.sql.streaming.checkpointFileManagerClass": (
        "org.apache.spark.sql.execution.streaming.checkpointing."
        "FileSystemBasedCheckpointFileManager"
    ),
}


# Spark gives each Python worker it starts (the amqp source's runner among them) a fixed
# 10 s to connect back, with no setting; a host busy enough to miss that fails the query,
# though nothing is wrong with it. The job restarts such a query from its checkpoint, in
# the same Spark session, as Spark itself retries a failed task.
TRANSIENT_FAILURES = ("Python worker failed to connect back",)
QUERY_ATTEMPTS = 3

# How the job keeps its state in the checkpoint. Spark cannot resume a checkpoint whose
# stateful operators or state schemas changed; 2: the dedupe moved into the device step.
CHECKPOINT_LAYOUT = 2
LAYOUT_FILE = "enmesh-layout"


class CheckpointLayoutError(RuntimeError):
    """The checkpoint was written by a job that keeps its state differently."""


def claim_checkpoint(checkpoint: Path) -> None:
    """Mark a new checkpoint with the job's layout; refuse one of another layout (one
    without the mark is from before the mark: layout 1)."""
    marker = checkpoint / LAYOUT_FILE
    if not (checkpoint / "offsets").exists():
        checkpoint.mkdir(parents=True, exist_ok=True)
        marker.write_text(f"{CHECKPOINT_LAYOUT}\n", encoding="utf-8")
        return
    found = marker.read_text(encoding="utf-8").strip() if marker.exists() else "1"
    if found != str(CHECKPOINT_LAYOUT):
        raise CheckpointLayoutError(
            f"{checkpoint} holds the state of an older telemetry job (layout {found}); this "
            f"job keeps its state differently (layout {CHECKPOINT_LAYOUT}) and cannot resume "
            "from it. To start afresh, stop the job and move the checkpoint aside: messages "
            "it has not accepted are redelivered, but device baselines and open windows "
            "start over (a window open at the switch is written again, partly)."
        )


@dataclass(frozen=True)
class JobConfig:
    out: Path
    source: dict[str, str]  # amqp options for the telemetry address
    sink: dict[str, str]  # amqp options for alerts and commands
    command_ttl_ms: int = 30_000
    state_partitions: int = 2
    # a reading stamped further ahead of its arrival would close its device's windows early
    max_clock_skew_ms: int = 300_000
    device: Settings = field(default_factory=Settings)

    @property
    def idle_tick_ms(self) -> int:
        """How often an idle job runs a batch. Silence timers fire only in a batch, and one
        that fires more than half the idle close late counts as not on time."""
        return min(5_000, self.device.idle_close_ms // 8)

    @property
    def idle_tick_for_ms(self) -> int:
        """How long after the last message an idle job keeps running those batches. A
        device's silence is three on-time expiries of a timer armed every half idle close,
        the first armed by its last reading at the latest: its timers are all done within
        two idle closes plus three ticks' lateness. Twice that leaves room for batches
        slowed by a busy host; after it an idle job runs no batch at all."""
        return 4 * self.device.idle_close_ms


def check(messages: DataFrame, max_clock_skew_ms: int) -> DataFrame:
    """Every message with its parsed fields and, when it is unusable, `reason`; every row
    has an id."""
    received_ms = F.unix_millis("received_time")
    parsed = messages.withColumn("t", F.from_json("body", TELEMETRY_SCHEMA)).withColumn(
        "raw", F.from_json("body", RAW_METRICS_SCHEMA)
    )
    reason = (
        F.when(F.try_parse_json("body").isNull(), F.lit("not json"))
        .when(F.col("t.device").isNull(), F.lit("no device"))
        .when(F.col("t.ts").isNull(), F.lit("no timestamp"))
        .when(
            F.col("t.metrics.temperature").isNull(),
            F.when(
                F.col("raw.metrics.temperature").isNotNull(), F.lit("temperature not a number")
            ).otherwise(F.lit("no temperature")),
        )
        .when(F.col("t.ts") > received_ms + max_clock_skew_ms, F.lit("timestamp in the future"))
    )
    return parsed.withColumn("reason", reason).select(
        # a message without an id gets one: rows, alerts and commands need it (it cannot be
        # recognised when redelivered, so it is never dropped as a duplicate)
        F.coalesce("id", F.expr("uuid()")).alias("id"),
        "body",
        "reason",
        "received_time",
        received_ms.alias("received_ms"),
        F.col("t.device").alias("device"),
        F.col("t.ts").alias("ts_ms"),
        F.col("t.metrics.temperature").alias("temperature"),
        F.col("t.metrics.humidity").alias("humidity"),
    )


def per_device(messages: DataFrame, config: JobConfig) -> DataFrame:
    """The streaming plan from raw messages to the device step's output rows."""
    checked = check(messages, config.max_clock_skew_ms)
    # quarantined records share the null key
    keyed = checked.select(
        F.when(F.col("reason").isNull(), F.col("device")).alias("key"), *INPUT_COLUMNS
    )
    return keyed.groupBy("key").transformWithState(
        DeviceProcessor(config.device), OUTPUT_SCHEMA, "Append", "ProcessingTime"
    )


def _messages(anomalies: pa.Table, config: JobConfig) -> Iterator[Row]:
    """An alert to the topic and a command to the device's queue per anomaly."""
    for a in anomalies.to_pylist():
        device = {"device": a["device"]}
        alert = {"device": a["device"], "ts": str(a["ts"]), "temperature": a["temperature"]}
        yield Row(
            to="alerts", subject="anomaly", body=json.dumps(alert | {"z": a["z"]}),
            ttl_ms=None, id=f"alert-{a['id']}", properties=device,
        )  # fmt: skip
        command = {"device": a["device"], "reading": a["id"]}
        yield Row(
            to="commands", subject="recalibrate", body=json.dumps(command),
            ttl_ms=config.command_ttl_ms, id=f"command-{a['id']}", properties=device,
        )  # fmt: skip


def process_batch(output: DataFrame, batch_id: int, config: JobConfig) -> None:
    """One micro-batch of the device step's output: run once (collected to the driver),
    written, then announced."""
    rows = tables.of_batch(output.toArrow(), datetime.now(UTC))
    publish.forget(config.out, list(tables.TABLES), batch_id)
    for name, table in rows.items():
        publish.write(table, config.out / name, batch_id)
    if any(table.num_rows for table in rows.values()):
        stored = ", ".join(f"{table.num_rows} {name}" for name, table in rows.items())
        print(f"batch {batch_id} stored: {stored}", flush=True)
    if rows["anomalies"].num_rows:
        send_rows(config.sink, _messages(rows["anomalies"], config))


def session(app: str, master: str | None = None) -> SparkSession:
    """The job's Spark session. `master` None means spark-submit's master, else local[*]."""
    # Spark's Python workers must run this interpreter (its venv holds enmesh_spark, proton).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if master is None or master.startswith("local"):
        # A driver started here binds loopback, not the host's first other address (under
        # spark-submit the JVM already runs, and the spark role sets the stack address).
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(app)
    if master:
        builder = builder.master(master)
    return builder.config("spark.ui.enabled", "false").getOrCreate()


def start(  # type: ignore[no-untyped-def]
    spark: SparkSession,
    config: JobConfig,
    trigger_seconds: float | None = 1.0,
    messages: DataFrame | None = None,
):
    """Start the job on `messages` (id, body, received_time; default: the `amqp` source
    with `config.source`). `trigger_seconds` None runs batches back to back."""
    spark.dataSource.register(AmqpDataSource)
    for key, value in SPARK_SETTINGS.items():
        spark.conf.set(key, value)
    # the state's partitioning is fixed by the first run's checkpoint
    spark.conf.set("spark.sql.shuffle.partitions", str(config.state_partitions))
    checkpoint = config.out / "_checkpoint"
    claim_checkpoint(checkpoint)
    if messages is None:
        ticks = {
            "idleTickMs": str(config.idle_tick_ms),
            "idleTickForMs": str(config.idle_tick_for_ms),
        }
        options = ticks | config.source
        messages = spark.readStream.format("amqp").options(**options).load()
    writer = (
        per_device(messages, config)
        .writeStream.foreachBatch(lambda df, i: process_batch(df, i, config))
        .option("checkpointLocation", str(checkpoint))
    )
    if trigger_seconds:
        writer = writer.trigger(processingTime=f"{trigger_seconds} seconds")
    return writer.start()


def run_until_idle(query, idle_seconds: float, poll_seconds: float) -> None:  # type: ignore[no-untyped-def]
    """Run until stopped or, with `idle_seconds`, until no message has arrived for that long
    and no batch is running. (Spark's `isTriggerActive` is no idle signal: the source's
    read waits for messages inside every trigger.)"""
    seen, rows_at = None, time.monotonic()
    while not query.awaitTermination(poll_seconds):
        progress = query.lastProgress
        if progress is None:  # still starting: idle time counts from the first trigger
            rows_at = time.monotonic()
            continue
        if progress["batchId"] != seen and progress["numInputRows"]:
            rows_at = time.monotonic()  # (process_batch logs what the batch stored)
        seen = progress["batchId"]
        processing = query.status["message"].startswith("Processing")
        if idle_seconds and not processing and time.monotonic() - rows_at >= idle_seconds:
            return


def _options(args: argparse.Namespace, address: str) -> dict[str, str]:
    options = {"url": args.url, "address": address, "user": args.user}
    if args.password_file:
        options["passwordFile"] = str(args.password_file)
    if args.ca:
        options["caFile"] = str(args.ca)
    return options


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="enmesh-telemetry", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--url",
        required=True,
        help="router URL, e.g. amqps://127.0.0.1:5671, or several separated by commas "
        "(the first that answers is used; a router lost ends the job for a restart)",
    )
    parser.add_argument("--user", required=True, help="SASL identity, e.g. backend@iot")
    parser.add_argument("--password-file", type=Path, required=True)
    parser.add_argument("--ca", type=Path, help="CA certificate for amqps")
    parser.add_argument("--address", default="readings", help="telemetry address (a queue)")
    parser.add_argument("--out", type=Path, required=True, help="output directory (Parquet)")
    parser.add_argument(
        "--master", help="Spark master URL (default: spark-submit's --master, else local[*])"
    )
    parser.add_argument(
        "--trigger-seconds", type=float, default=1.0, help="0: start each batch at once"
    )
    parser.add_argument("--batch-size", type=int, default=500)
    # the defaults are JobConfig's and Settings'
    parser.add_argument(
        "--command-ttl-seconds", type=float, default=JobConfig.command_ttl_ms / 1000
    )
    parser.add_argument("--lateness-seconds", type=float, default=Settings.lateness_ms / 1000)
    parser.add_argument("--idle-close-seconds", type=float, default=Settings.idle_close_ms / 1000)
    parser.add_argument(
        "--dedupe-minutes", type=float, default=Settings.dedupe_ms / 60_000,
        help="drop a message whose id the job had this long ago (a redelivery)",
    )  # fmt: skip
    parser.add_argument(
        "--max-clock-skew-seconds", type=float, default=JobConfig.max_clock_skew_ms / 1000,
        help="quarantine readings stamped further ahead of their arrival",
    )  # fmt: skip
    parser.add_argument("--state-partitions", type=int, default=JobConfig.state_partitions)
    parser.add_argument(
        "--until-idle",
        type=float,
        default=0,
        metavar="SECONDS",
        help="stop once no message arrived for SECONDS (default 0: run until stopped)",
    )
    args = parser.parse_args(argv)
    source = _options(args, args.address) | {"batchSize": str(args.batch_size)}
    config = JobConfig(
        out=args.out,
        source=source,
        sink=_options(args, "alerts"),
        command_ttl_ms=int(args.command_ttl_seconds * 1000),
        max_clock_skew_ms=int(args.max_clock_skew_seconds * 1000),
        state_partitions=args.state_partitions,
        device=Settings(
            lateness_ms=int(args.lateness_seconds * 1000),
            idle_close_ms=int(args.idle_close_seconds * 1000),
            dedupe_ms=int(args.dedupe_minutes * 60_000),
        ),
    )
    try:  # before Spark starts (half a minute), so a refused checkpoint fails at once
        claim_checkpoint(config.out / "_checkpoint")
    except CheckpointLayoutError as error:
        print(f"enmesh-telemetry: {error}", file=sys.stderr)
        return 2
    spark = session("enmesh-telemetry", args.master)
    try:
        run_query(spark, config, args.trigger_seconds, args.until_idle)
    finally:
        spark.stop()
    return 0


def run_query(
    spark: SparkSession, config: JobConfig, trigger_seconds: float, until_idle: float
) -> None:
    """Start the query and run it (see `run_until_idle`); a query that failed for a
    transient reason (TRANSIENT_FAILURES) starts again from its checkpoint."""
    for attempt in range(1, QUERY_ATTEMPTS + 1):
        query = start(spark, config, trigger_seconds or None)
        try:
            run_until_idle(query, until_idle, max(trigger_seconds, 0.5))
            return
        except StreamingQueryException as error:
            reason = next((r for r in TRANSIENT_FAILURES if r in str(error)), None)
            if reason is None or attempt == QUERY_ATTEMPTS:
                raise
            print(
                f"enmesh-telemetry: the query failed ({reason}, attempt {attempt} of "
                f"{QUERY_ATTEMPTS}); starting it again from its checkpoint",
                file=sys.stderr,
                flush=True,
            )
        finally:
            query.stop()


if __name__ == "__main__":
    sys.exit(main())
