"""The `amqp` Spark data source: a streaming reader and a writer over python-qpid-proton.

    spark.dataSource.register(AmqpDataSource)
    spark.readStream.format("amqp").option("url", ...).option("address", "events").load()

Reading (queue: at-least-once). The reader runs in one process on the driver. Each
micro-batch takes up to `batchSize` messages; their deliveries are accepted only when
Spark commits the batch, so a crash before that leaves them unsettled and the broker
redelivers them to the next reader. Rows carry the message id so the job can drop a
redelivered message it already stored. With `settle=receipt` (anycast telemetry, best
effort) messages are accepted as soon as they are read.

Writing: each row becomes a message (`to`, `subject`, `body`, `ttl_ms`, `id`,
`properties`), sent unsettled and counted only when the peer accepts it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from proton import ConnectionException, Message, Timeout
from proton.utils import BlockingConnection
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamWriter,
    DataSourceWriter,
    SimpleDataSourceStreamReader,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from enmesh_spark.consumer import (
    HEARTBEAT_SECONDS,
    Consumer,
    ConsumerError,
    Received,
    Source,
    connect_options_of,
)

READ_SCHEMA = (
    "id string, address string, subject string, body string, "
    "properties map<string,string>, creation_time timestamp, received_time timestamp, "
    "delivery_count int"
)
WRITE_FIELDS = ("to", "subject", "body", "ttl_ms", "id", "properties")


class AmqpOptionError(ValueError):
    """An option is missing or wrong; the message names it."""


def _lower(options: dict[str, str]) -> dict[str, str]:
    """Spark hands options over with lower-cased keys; accept either spelling."""
    return {key.lower(): value for key, value in options.items()}


def _password(options: dict[str, str]) -> str | None:
    """`passwordFile` (preferred: nothing in the query plan) or `password`."""
    if options.get("passwordfile"):
        return Path(options["passwordfile"]).read_text(encoding="utf-8").strip()
    return options.get("password")


def source_from(options: dict[str, str], window: int = 1000) -> Source:
    """The connection and link `options` name; `window`: the credit unless option
    `window` sets it."""
    options = _lower(options)
    for required in ("url", "address"):
        if not options.get(required):
            raise AmqpOptionError(f"amqp source: option {required!r} is required")
    user = options.get("user")
    return Source(
        url=options["url"],
        address=options["address"],
        user=user,
        password=_password(options),
        vhost=options.get("vhost") or (user.split("@", 1)[1] if user and "@" in user else None),
        ca=options.get("cafile"),
        window=_int(options, "window", window),
    )


def _int(options: dict[str, str], key: str, default: int, minimum: int = 1) -> int:
    value = _lower(options).get(key.lower())
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise AmqpOptionError(f"amqp: option {key!r} must be an integer, got {value!r}") from None
    if number < minimum:
        raise AmqpOptionError(f"amqp: option {key!r} must be at least {minimum}, got {number}")
    return number


def _text(body: Any) -> str:
    if isinstance(body, bytes | memoryview):
        return bytes(body).decode("utf-8", errors="replace")
    if isinstance(body, str):
        return body
    return json.dumps(body, default=str)


def _row(received: Received, now: datetime) -> tuple[Any, ...]:
    message = received.message
    created = datetime.fromtimestamp(message.creation_time, UTC) if message.creation_time else None
    raw: dict[Any, Any] = message.properties or {}
    properties = {str(key): str(value) for key, value in raw.items()}
    return (
        None if message.id is None else str(message.id),
        message.address,
        message.subject,
        _text(message.body),
        properties,
        created,
        now,
        message.delivery_count,
    )


class AmqpStreamReader(SimpleDataSourceStreamReader):
    """Offsets are message sequence numbers: `{"seq": n}` ends at the n-th message read.

    With `idleTickMs`, an offset also counts idle ticks (`{"seq": n, "tick": k}`): when no
    message has come for that long, the offset moves on without a message, so Spark runs
    an empty batch. A job that turns Spark's empty batches off (they run on every trigger
    while a stateful operator keeps processing-time timers) still gets its timers fired.
    With `idleTickForMs`, ticks stop once no message has come for that long (and start
    again with the next one): a job whose timers all fire within that time of the last
    message then costs nothing while idle (each empty batch is about 2 s of CPU).
    """

    def __init__(self, options: dict[str, str]) -> None:
        self.batch_size = _int(options, "batchSize", 500)
        # A batch's deliveries stay unsettled until Spark commits it, while the next batch
        # fills: with less credit than two batches, the link stalls at every commit.
        self.source = source_from(options, window=2 * self.batch_size)
        self.wait = _int(options, "waitMs", 500) / 1000
        self.settle_on_receipt = _lower(options).get("settle", "commit") == "receipt"
        self.idle_tick = _int(options, "idleTickMs", 0, minimum=0) / 1000
        self.idle_tick_for = _int(options, "idleTickForMs", 0, minimum=0) / 1000
        # (a start counts as a message: a restarted job's state may hold timers)
        self._moved_at = self._message_at = time.monotonic()
        self._consumer: Consumer | None = None
        self._pending: dict[int, Received] = {}  # seq -> delivery awaiting commit
        self._rows: dict[int, tuple[Any, ...]] = {}

    @property
    def consumer(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(self.source)
        return self._consumer

    def initialOffset(self) -> dict[str, int]:  # noqa: N802  (Spark's API)
        return {"seq": 0}

    def read(self, start: dict[str, int]) -> tuple[Iterator[tuple[Any, ...]], dict[str, int]]:
        # Spark plans the next batch only after the previous one is stored and logged as
        # committed, so everything up to `start` is safe to accept. (Its `commit` call comes
        # later, and never for the last batch of an idle stream: without this, that batch
        # would be redelivered after every restart and count towards the delivery limit.)
        self.commit(start)
        taken = self.consumer.take(self.batch_size, self.wait)
        now = datetime.now(UTC)
        first = int(start["seq"])
        rows = []
        for offset, received in enumerate(taken, start=first + 1):
            row = _row(received, now)
            rows.append(row)
            if self.settle_on_receipt:
                continue
            self._pending[offset] = received
            self._rows[offset] = row
        if self.settle_on_receipt:
            self.consumer.accept(r.delivery for r in taken)
        end = {"seq": first + len(taken), "tick": int(start.get("tick", 0))}
        now_s = time.monotonic()
        if taken:
            self._message_at = now_s
        elif self._ticking(now_s):
            end["tick"] += 1
        if end != start:
            self._moved_at = now_s
        return iter(rows), end

    def _ticking(self, now_s: float) -> bool:
        """Whether an idle read moves the offset on (see the class's docstring)."""
        if not self.idle_tick or now_s - self._moved_at < self.idle_tick:
            return False
        return not self.idle_tick_for or now_s - self._message_at < self.idle_tick_for

    def readBetweenOffsets(  # noqa: N802
        self, start: dict[str, int], end: dict[str, int]
    ) -> Iterator[tuple[Any, ...]]:
        # A replay after a failure in this process; after a restart nothing is held here
        # and the broker redelivers whatever was not accepted.
        return iter(
            [self._rows[s] for s in range(start["seq"] + 1, end["seq"] + 1) if s in self._rows]
        )

    def commit(self, end: dict[str, int]) -> None:
        done = sorted(s for s in self._pending if s <= end["seq"])
        self.consumer.accept(self._pending.pop(s).delivery for s in done)
        for s in done:
            self._rows.pop(s, None)

    def stop(self) -> None:
        if self._consumer is not None:
            self._consumer.close()


class _Commit(WriterCommitMessage):
    def __init__(self, sent: int) -> None:
        self.sent = sent


def send_rows(options: dict[str, str], rows: Iterator[Any]) -> int:
    """Send every row as a message and wait until each is accepted; returns the count."""
    source = source_from({"address": "unused", **_lower(options)})
    connection = _connect_any(source, _int(options, "timeoutSeconds", 30))
    senders: dict[str, Any] = {}
    sent = 0
    try:
        for row in rows:
            fields = row.asDict()
            to = fields.get("to") or _lower(options).get("address")
            if not to:
                raise AmqpOptionError("amqp sink: a row has no `to` and no option 'address'")
            if to not in senders:
                senders[to] = connection.create_sender(to)
            message = Message(
                id=fields.get("id"),
                subject=fields.get("subject"),
                body=fields.get("body"),
                durable=True,
                properties=dict(fields.get("properties") or {}),
                content_type="application/json",
            )
            if fields.get("ttl_ms") is not None:
                message.ttl = fields["ttl_ms"] / 1000
            senders[to].send(message)
            sent += 1
    finally:
        connection.close()
    return sent


def _connect_any(source: Source, timeout: float) -> BlockingConnection:
    """A connection to the first of the source's URLs that answers."""
    problems = []
    for url in source.urls():
        try:
            return BlockingConnection(
                **connect_options_of(source, url), timeout=timeout, heartbeat=HEARTBEAT_SECONDS
            )
        except (ConnectionException, Timeout) as error:
            problems.append(f"{url}: {error}")
    raise ConsumerError("amqp sink: no router answered: " + "; ".join(problems))


class AmqpBatchWriter(DataSourceWriter):
    def __init__(self, options: dict[str, str]) -> None:
        self.options = options

    def write(self, iterator: Iterator[Any]) -> _Commit:
        return _Commit(send_rows(self.options, iterator))


class AmqpStreamWriter(DataSourceStreamWriter):
    def __init__(self, options: dict[str, str]) -> None:
        self.options = options

    def write(self, iterator: Iterator[Any]) -> _Commit:
        return _Commit(send_rows(self.options, iterator))

    def commit(self, messages: list[Any], batchId: int) -> None:  # noqa: N803
        """Nothing to do: every message was accepted before `write` returned."""

    def abort(self, messages: list[Any], batchId: int) -> None:  # noqa: N803
        """Messages already accepted cannot be recalled; consumers dedupe by id."""


class AmqpDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "amqp"

    def schema(self) -> str:
        return READ_SCHEMA

    def simpleStreamReader(self, schema: StructType) -> AmqpStreamReader:  # noqa: N802
        return AmqpStreamReader(dict(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> AmqpBatchWriter:
        return AmqpBatchWriter(dict(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> AmqpStreamWriter:  # noqa: N802
        return AmqpStreamWriter(dict(self.options))
