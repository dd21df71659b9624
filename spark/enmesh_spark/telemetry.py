"""The telemetry job: AMQP -> readings, quarantine, windows, anomalies -> Parquet and AMQP.

Every micro-batch (foreachBatch) does, in this order:
1. parse JSON telemetry; records that fail go to `quarantine/` with the reason;
2. drop readings whose message id is already stored (a redelivery after a crash);
3. score new readings against each device's rolling baseline (the previous `baseline`
   readings): |z| > `threshold` is an anomaly -> `anomalies/`, an alert to the `alerts`
   topic and a command with a TTL to the `commands` queue (message ids derive from the
   reading, so a resent alert can be recognised);
4. append readings to `readings/` (partitioned by date);
5. recompute the tumbling (1 min) and sliding (5 min every 1 min) windows of the dates
   touched: count, mean, min, max, p95 -> `windows_tumbling/`, `windows_sliding/`.
Only then does Spark commit the batch, and only then are the deliveries accepted.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812
from pyspark.sql.window import Window

from enmesh_spark.source import AmqpDataSource

TELEMETRY_SCHEMA = "device string, ts long, metrics map<string,double>"
RAW_METRICS_SCHEMA = "metrics map<string,string>"
READING_COLUMNS = (
    "id", "device", "ts", "temperature", "humidity", "received_time", "processed_time", "date"
)  # fmt: skip
QUARANTINE_COLUMNS = ("id", "body", "reason", "received_time", "date")
SLIDE = timedelta(minutes=5)  # the longest window: how far a reading reaches into a neighbour day


@dataclass(frozen=True)
class JobConfig:
    out: Path
    source: dict[str, str]  # amqp options for the telemetry address
    sink: dict[str, str]  # amqp options for alerts and commands
    command_ttl_ms: int = 30_000
    baseline: int = 50
    min_baseline: int = 10
    threshold: float = 4.0

    def path(self, table: str) -> str:
        return str(self.out / table)


def _partitions(path: str, dates: Iterable[date]) -> list[str]:
    """The stored partitions of `dates` (only these are listed and read)."""
    found = [f"{path}/date={day.isoformat()}" for day in sorted(set(dates))]
    return [partition for partition in found if any(Path(partition).glob("*.parquet"))]


def _stored(spark: SparkSession, path: str, dates: Iterable[date]) -> DataFrame | None:
    """The rows of a table in the given dates, or None when it holds none yet."""
    partitions = _partitions(path, dates)
    if not partitions:
        return None
    return spark.read.option("basePath", path).parquet(*partitions)


def _append(frame: DataFrame, path: str) -> None:
    # one file per date and batch: fewer, larger files keep later reads cheap
    frame.repartition("date").write.mode("append").partitionBy("date").parquet(path)


def check(batch: DataFrame) -> DataFrame:
    """Every message of a batch with its parsed fields and, when it is unusable, `reason`.
    `date` is the reading's date, or for a quarantined message the date it was received."""
    parsed = batch.withColumn("t", F.from_json("body", TELEMETRY_SCHEMA)).withColumn(
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
    )
    ts = (F.col("t.ts") / 1000).cast("timestamp")
    return parsed.withColumn("reason", reason).select(
        "id",
        "body",
        "reason",
        "received_time",
        F.col("t.device").alias("device"),
        ts.alias("ts"),
        F.col("t.metrics.temperature").alias("temperature"),
        F.col("t.metrics.humidity").alias("humidity"),
        F.current_timestamp().alias("processed_time"),
        F.when(F.col("reason").isNull(), F.to_date(ts))
        .otherwise(F.to_date("received_time"))
        .alias("date"),
    )


def quarantined(checked: DataFrame) -> DataFrame:
    return checked.where(F.col("reason").isNotNull()).select(*QUARANTINE_COLUMNS)


def valid(checked: DataFrame) -> DataFrame:
    return checked.where(F.col("reason").isNull()).select(*READING_COLUMNS)


def _new_only(rows: DataFrame, existing: DataFrame | None) -> DataFrame:
    rows = rows.dropDuplicates(["id"])
    if existing is None:
        return rows
    return rows.join(existing.select("id"), "id", "left_anti")


def anomalies(new: DataFrame, stored: DataFrame | None, config: JobConfig) -> DataFrame:
    """New readings whose temperature is `threshold` deviations off the device's baseline."""
    history = new if stored is None else stored.select(new.columns).unionByName(new)
    history = history.join(new.select("device").distinct(), "device")
    previous = Window.partitionBy("device").orderBy("ts", "id").rowsBetween(-config.baseline, -1)
    scored = (
        history.withColumn("baseline_mean", F.avg("temperature").over(previous))
        .withColumn("baseline_std", F.stddev_samp("temperature").over(previous))
        .withColumn("baseline_n", F.count("temperature").over(previous))
        .join(new.select("id"), "id")
        .withColumn("z", (F.col("temperature") - F.col("baseline_mean")) / F.col("baseline_std"))
    )
    return scored.where(
        (F.col("baseline_n") >= config.min_baseline)
        & (F.col("baseline_std") > 0)
        & (F.abs(F.col("z")) > config.threshold)
    ).select("id", "device", "ts", "temperature", "baseline_mean", "baseline_std", "z", "date")


def _notify(found: DataFrame, config: JobConfig) -> None:
    payload = F.to_json(
        F.struct("device", F.col("ts").cast("string").alias("ts"), "temperature", "z")
    )
    alerts = found.select(
        F.lit("alerts").alias("to"),
        F.lit("anomaly").alias("subject"),
        payload.alias("body"),
        F.lit(None).cast("long").alias("ttl_ms"),
        F.concat(F.lit("alert-"), "id").alias("id"),
        F.create_map(F.lit("device"), "device").alias("properties"),
    )
    commands = found.select(
        F.lit("commands").alias("to"),
        F.lit("recalibrate").alias("subject"),
        F.to_json(F.struct("device", F.col("id").alias("reading"))).alias("body"),
        F.lit(config.command_ttl_ms).cast("long").alias("ttl_ms"),
        F.concat(F.lit("command-"), "id").alias("id"),
        F.create_map(F.lit("device"), "device").alias("properties"),
    )
    outgoing = alerts.unionByName(commands)
    outgoing.write.format("amqp").options(**config.sink).mode("append").save()


def windows(readings: DataFrame, duration: str, slide: str | None = None) -> DataFrame:
    window = F.window("ts", duration, slide) if slide else F.window("ts", duration)
    return (
        readings.groupBy("device", window.alias("window"))
        .agg(
            F.count("*").alias("count"),
            F.avg("temperature").alias("mean"),
            F.min("temperature").alias("min"),
            F.max("temperature").alias("max"),
            F.percentile("temperature", F.lit(0.95)).alias("p95"),
        )
        .select(
            "device",
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "count",
            "mean",
            "min",
            "max",
            "p95",
            F.to_date("window.start").alias("date"),
        )
    )


@dataclass(frozen=True)
class BatchDays:
    """Which dates a batch touches: what to read, and which window partitions to rewrite."""

    readings: list[date]  # dates of the batch's valid readings
    quarantine: list[date]
    near_start: list[date]  # dates with a reading in their first SLIDE (previous day's windows)

    @classmethod
    def of(cls, checked: DataFrame) -> BatchDays:
        rows = (
            checked.groupBy(F.col("reason").isNull().alias("valid"), "date")
            .agg(
                (
                    F.unix_timestamp(F.min("ts"))
                    - F.unix_timestamp(F.col("date").cast("timestamp"))
                    < SLIDE.total_seconds()
                ).alias("near_start")
            )
            .collect()
        )
        return cls(
            readings=sorted(row.date for row in rows if row.valid),
            quarantine=sorted(row.date for row in rows if not row.valid),
            near_start=sorted(row.date for row in rows if row.valid and row.near_start),
        )

    def history(self) -> list[date]:
        """The baseline of a device may reach into the day before."""
        return sorted({day - timedelta(days=1) for day in self.readings} | set(self.readings))

    def window_dates(self) -> list[date]:
        """Window partitions to recompute: the batch's dates, and the day before when a
        reading falls into that day's last (sliding) windows."""
        return sorted(set(self.readings) | {day - timedelta(days=1) for day in self.near_start})


def process_batch(batch: DataFrame, batch_id: int, config: JobConfig) -> None:
    """One micro-batch. The parsed batch and the new readings are materialised once (a
    write to a table drops cached plans that read it); `readings/` is appended last: it is
    what later batches deduplicate against, so a crash before it makes the replay
    recompute everything else the same way."""
    spark = batch.sparkSession
    checked = check(batch).localCheckpoint(eager=True)
    days = BatchDays.of(checked)
    if days.quarantine:
        stored = _stored(spark, config.path("quarantine"), days.quarantine)
        _append(_new_only(quarantined(checked), stored), config.path("quarantine"))
    if not days.readings:
        return
    stored = _stored(spark, config.path("readings"), days.history())
    new = _new_only(valid(checked), stored).localCheckpoint(eager=True)
    if new.isEmpty():
        return
    found = anomalies(new, stored, config).localCheckpoint(eager=True)
    if not found.isEmpty():
        _notify(found, config)
        stored_found = _stored(spark, config.path("anomalies"), days.readings)
        _append(_new_only(found, stored_found), config.path("anomalies"))
    _rewrite_windows(spark, new, days, config)
    _append(new, config.path("readings"))


def _rewrite_windows(
    spark: SparkSession, new: DataFrame, days: BatchDays, config: JobConfig
) -> None:
    """Recompute every window of the affected dates (exact p95 needs all their readings)."""
    rewrite = days.window_dates()
    inputs = sorted(set(rewrite) | {day + timedelta(days=1) for day in rewrite})
    stored = _stored(spark, config.path("readings"), inputs)
    readings = new if stored is None else stored.select(*READING_COLUMNS).unionByName(new)
    for table, frame in (
        ("windows_tumbling", windows(readings, "1 minute")),
        ("windows_sliding", windows(readings, "5 minutes", "1 minute")),
    ):
        frame.where(F.col("date").isin(rewrite)).write.mode("overwrite").partitionBy(
            "date"
        ).parquet(config.path(table))


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
    return (
        builder.config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )


def start(spark: SparkSession, config: JobConfig, trigger_seconds: float = 1.0):  # type: ignore[no-untyped-def]
    spark.dataSource.register(AmqpDataSource)
    spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
    spark.conf.set("spark.sql.session.timeZone", "UTC")  # dates and windows are UTC
    stream = spark.readStream.format("amqp").options(**config.source).load()
    return (
        stream.writeStream.foreachBatch(lambda df, i: process_batch(df, i, config))
        .option("checkpointLocation", config.path("_checkpoint"))
        .trigger(processingTime=f"{trigger_seconds} seconds")
        .start()
    )


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
            print(f"batch {progress['batchId']}: {progress['numInputRows']} rows", flush=True)
            rows_at = time.monotonic()
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
    parser.add_argument("--url", required=True, help="router URL, e.g. amqps://127.0.0.1:5671")
    parser.add_argument("--user", required=True, help="SASL identity, e.g. backend@iot")
    parser.add_argument("--password-file", type=Path, required=True)
    parser.add_argument("--ca", type=Path, help="CA certificate for amqps")
    parser.add_argument("--address", default="readings", help="telemetry address (a queue)")
    parser.add_argument("--out", type=Path, required=True, help="output directory (Parquet)")
    parser.add_argument(
        "--master", help="Spark master URL (default: spark-submit's --master, else local[*])"
    )
    parser.add_argument("--trigger-seconds", type=float, default=1.0)
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--command-ttl-seconds", type=float, default=30.0)
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
    )
    spark = session("enmesh-telemetry", args.master)
    query = start(spark, config, args.trigger_seconds)
    try:
        run_until_idle(query, args.until_idle, args.trigger_seconds)
    finally:
        query.stop()
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
