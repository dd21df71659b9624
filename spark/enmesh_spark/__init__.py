"""enmesh's telemetry pipeline on Spark: the `amqp` data source and the telemetry job."""
