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
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812
from pyspark.sql.window import Window

from enmesh_spark.source import AmqpDataSource

TELEMETRY_SCHEMA = "device string, ts long, metrics map<string,double>"
RAW_METRICS_SCHEMA = "metrics map<string,string>"


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


def _table(spark: SparkSession, path: str) -> DataFrame | None:
    """A stored table, or None before its first row was written."""
    return spark.read.parquet(path) if any(Path(path).glob("date=*/*.parquet")) else None


def _append(frame: DataFrame, path: str) -> None:
    if not frame.isEmpty():
        frame.write.mode("append").partitionBy("date").parquet(path)


def parse(batch: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(readings, quarantine) of a batch of messages."""
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
    checked = parsed.withColumn("reason", reason)
    quarantine = checked.where(F.col("reason").isNotNull()).select(
        "id", "body", "reason", "received_time", F.to_date("received_time").alias("date")
    )
    readings = checked.where(F.col("reason").isNull()).select(
        "id",
        F.col("t.device").alias("device"),
        (F.col("t.ts") / 1000).cast("timestamp").alias("ts"),
        F.col("t.metrics.temperature").alias("temperature"),
        F.col("t.metrics.humidity").alias("humidity"),
        "received_time",
        F.current_timestamp().alias("processed_time"),
    )
    return readings.withColumn("date", F.to_date("ts")), quarantine


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
    if not outgoing.isEmpty():
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


def process_batch(batch: DataFrame, batch_id: int, config: JobConfig) -> None:
    """One micro-batch. Spark re-lists a table's files whenever a plan runs, and writing to
    a path drops cached plans that read it, so the new readings are materialised first and
    `readings/` is appended last: it is what later batches deduplicate against, and a crash
    before it makes the replay recompute everything else the same way."""
    spark = batch.sparkSession
    readings, quarantine = parse(batch)
    _append(
        _new_only(quarantine, _table(spark, config.path("quarantine"))), config.path("quarantine")
    )
    stored = _table(spark, config.path("readings"))
    new = _new_only(readings, stored).localCheckpoint(eager=True)
    if new.isEmpty():
        return
    found = anomalies(new, stored, config).localCheckpoint(eager=True)
    _notify(found, config)
    _append(_new_only(found, _table(spark, config.path("anomalies"))), config.path("anomalies"))
    dates = [row.date for row in new.select("date").distinct().collect()]
    touched = new if stored is None else stored.select(new.columns).unionByName(new)
    touched = touched.where(F.col("date").isin(dates))
    for table, frame in (
        ("windows_tumbling", windows(touched, "1 minute")),
        ("windows_sliding", windows(touched, "5 minutes", "1 minute")),
    ):
        frame.write.mode("overwrite").partitionBy("date").parquet(config.path(table))
    _append(new, config.path("readings"))


def start(spark: SparkSession, config: JobConfig, trigger_seconds: float = 1.0):  # type: ignore[no-untyped-def]
    spark.dataSource.register(AmqpDataSource)
    spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
    stream = spark.readStream.format("amqp").options(**config.source).load()
    return (
        stream.writeStream.foreachBatch(lambda df, i: process_batch(df, i, config))
        .option("checkpointLocation", config.path("_checkpoint"))
        .trigger(processingTime=f"{trigger_seconds} seconds")
        .start()
    )


def run_until_idle(query, idle_checks: int, trigger_seconds: float) -> None:  # type: ignore[no-untyped-def]
    """Run until stopped, or until `idle_checks` checks in a row saw no new batch and no data."""
    last_batch, idle = -1, 0
    while idle_checks == 0 or idle < idle_checks:
        if query.awaitTermination(trigger_seconds * 2):
            return
        progress = query.lastProgress
        batch = -1 if progress is None else progress["batchId"]
        if batch != last_batch:
            print(f"batch {batch}: {progress['numInputRows']} rows", flush=True)
            last_batch, idle = batch, 0
        elif not (query.status["isDataAvailable"] or query.status["isTriggerActive"]):
            idle += 1


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
    parser.add_argument("--address", default="events", help="telemetry address (a queue)")
    parser.add_argument("--out", type=Path, required=True, help="output directory (Parquet)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--trigger-seconds", type=float, default=1.0)
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--command-ttl-seconds", type=float, default=30.0)
    parser.add_argument(
        "--until-idle",
        type=int,
        default=0,
        metavar="N",
        help="stop after N consecutive empty micro-batches (0: run until stopped)",
    )
    args = parser.parse_args(argv)
    source = _options(args, args.address) | {"batchSize": str(args.batch_size)}
    config = JobConfig(
        out=args.out,
        source=source,
        sink=_options(args, "alerts"),
        command_ttl_ms=int(args.command_ttl_seconds * 1000),
    )
    # Spark's Python workers must run this interpreter (its venv holds enmesh_spark, proton).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(args.master)
        .appName("enmesh-telemetry")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    query = start(spark, config, args.trigger_seconds)
    try:
        run_until_idle(query, args.until_idle, args.trigger_seconds)
    finally:
        query.stop()
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
