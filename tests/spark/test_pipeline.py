"""The telemetry pipeline end to end: simulator -> router mesh -> queue -> Spark -> Parquet,
alerts and commands back through the mesh. Real routers, real RabbitMQ, real Spark."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from enmesh_spark.consumer import HEARTBEAT_SECONDS, Consumer, ConsumerError, Source
from enmesh_spark.simulator import Reading, expected_anomalies, generate, send
from enmesh_spark.source import AmqpStreamReader, send_rows
from tests.support.mesh import Mesh, wait_until
from tests.support.ports import free_port
from tests.support.stack import brokered_mesh
from tests.support.windows import assert_windows_match

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    with brokered_mesh(tmp_path_factory.mktemp("pipeline")) as mesh:
        yield mesh


def _account(mesh: Mesh, identity: str, directory: Path) -> dict[str, str]:
    password = directory / f"{identity}.password"
    password.write_text(mesh.passwords[identity])
    password.chmod(0o600)
    return {"user": identity, "passwordFile": str(password), "caFile": str(mesh.ca)}


def _job(mesh: Mesh, out: Path, *extra: str) -> subprocess.Popen[str]:
    account = _account(mesh, "backend@iot", out.parent)
    command = [
        sys.executable, "-m", "enmesh_spark.telemetry",
        "--url", mesh.url(0, tls=True),
        "--user", account["user"],
        "--password-file", account["passwordFile"],
        "--ca", account["caFile"],
        "--out", str(out),
        "--trigger-seconds", "0.5",
        # a device's last windows close soon after the input ends (well above a batch's time)
        "--idle-close-seconds", "8",
        # The simulator sends minutes of device time per second, unpaced, and the mesh's two
        # paths to the queue reorder messages by milliseconds: minutes of device time here.
        "--lateness-seconds", "600",
        *extra,
    ]  # fmt: skip
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip


def _finish(job: subprocess.Popen[str], timeout: float = 300) -> str:
    output, _ = job.communicate(timeout=timeout)
    print(output)  # pytest shows it when a later assertion fails
    assert job.returncode == 0, output[-3000:]
    return output


def _simulate(
    mesh: Mesh, directory: Path, readings: list[Reading], address: str = "readings"
) -> None:
    device = _account(mesh, "device@iot", directory)
    password = Path(device["passwordFile"]).read_text()
    outcomes = send(
        readings, url=mesh.url(1, tls=True), address=address, user="device@iot",
        password=password, ca=str(mesh.ca),
    )  # fmt: skip
    assert outcomes["accepted"] == len(readings), outcomes


def _consumer(mesh: Mesh, router: int, address: str, identity: str) -> Consumer:
    source = Source(
        mesh.url(router, tls=True), address, identity, mesh.passwords[identity], "iot",
        str(mesh.ca),
    )  # fmt: skip
    return Consumer(source)


def _rows(path: Path) -> list[dict[str, Any]]:
    return pq.read_table(path).to_pylist() if path.exists() else []


def _stored_windows(out: Path, kind: str) -> list[tuple[tuple[str, int], dict[str, Any]]]:
    stored = _rows(out / f"windows_{kind}")
    return [((row["device"], int(row["window_start"].timestamp() * 1000)), row) for row in stored]


def _assert_windows_match(out: Path, readings: list[Reading]) -> None:
    assert_windows_match(lambda kind: _stored_windows(out, kind), readings)


def test_pipeline_aggregates_quarantines_and_alerts(stack: Mesh, tmp_path: Path) -> None:
    readings = generate(seed=7, devices=4, rate=2, duration=400, malformed=0.03, spikes=0.01)
    spikes = {r.id for r in readings if r.spike}
    malformed = {r.id: r.reason for r in readings if r.reason}
    assert spikes and malformed  # the seed injects both
    alerts = _consumer(stack, 1, "alerts", "backend@iot")
    # connected while the job runs: the model gives commands a 60 s TTL on the queue
    commands = _consumer(stack, 0, "commands", "device@iot")
    try:
        _simulate(stack, tmp_path, readings)
        out = tmp_path / "out"
        # the TTL the job puts on commands (the queue caps it at the model's 60 s)
        _finish(_job(stack, out, "--until-idle", "30", "--command-ttl-seconds", "900"))
        _assert_windows_match(out, readings)
        stored = _rows(out / "readings")
        assert len(stored) == len(readings) - len(malformed)
        quarantined = {row["id"]: row["reason"] for row in _rows(out / "quarantine")}
        assert quarantined == malformed
        anomalies = {row["id"] for row in _rows(out / "anomalies")}
        assert anomalies == expected_anomalies(readings)
        assert spikes <= anomalies
        wait_until(lambda: alerts.inbox.qsize() >= len(anomalies), 30, "alerts on the topic")
        received = alerts.take(10_000, 1)
        alerts.accept(r.delivery for r in received)
        assert {str(r.message.id) for r in received} == {f"alert-{i}" for i in anomalies}
        wait_until(lambda: commands.inbox.qsize() >= len(anomalies), 30, "commands on the queue")
        got = commands.take(10_000, 1)
        commands.accept(r.delivery for r in got)
        assert {str(r.message.id) for r in got} == {f"command-{i}" for i in anomalies}
        assert all(r.message.ttl == pytest.approx(900.0) for r in got)
    finally:
        alerts.close()
        commands.close()


def test_a_killed_job_restarts_from_its_checkpoint_without_loss_or_double_count(
    stack: Mesh, tmp_path: Path
) -> None:
    readings = generate(seed=11, devices=3, rate=5, duration=240)
    _simulate(stack, tmp_path, readings)
    out = tmp_path / "out"
    job = _job(stack, out, "--batch-size", "50")
    try:
        wait_until(
            lambda: len(_rows(out / "readings")) >= 200 or job.poll() is not None,
            180,
            "the job to store some readings",
        )
        assert job.poll() is None, job.communicate()[0][-3000:]
    finally:
        os.killpg(job.pid, signal.SIGKILL)  # mid-stream, no clean shutdown
        print(job.communicate(timeout=30)[0])  # pytest shows it when an assertion fails
    partial = len(_rows(out / "readings"))
    assert 0 < partial < len(readings)
    _finish(_job(stack, out, "--until-idle", "30"))
    stored = _rows(out / "readings")
    assert sorted(row["id"] for row in stored) == sorted(r.id for r in readings)
    _assert_windows_match(out, readings)


def test_expired_commands_are_not_delivered(stack: Mesh, tmp_path: Path) -> None:
    backend = _account(stack, "backend@iot", tmp_path)
    options = {"url": stack.url(0, tls=True), **backend}
    row = {"to": "commands", "subject": "recalibrate", "body": "{}", "properties": {}}

    class Row(dict[str, Any]):
        def asDict(self) -> dict[str, Any]:  # noqa: N802  (pyspark's Row API)
            return dict(self)

    sent_at = time.monotonic()
    send_rows(options, iter([Row(row, id="stale", ttl_ms=1000), Row(row, id="fresh", ttl_ms=None)]))
    # The TTL is wall-clock time: nothing to observe until it has passed.
    wait_until(lambda: time.monotonic() - sent_at > 2.0, 5, "the stale command's TTL to pass")
    commands = _consumer(stack, 1, "commands", "device@iot")
    seen: list[str] = []  # the queue is the module's: earlier tests may have left commands

    def fresh_arrived() -> bool:
        got = commands.take(1000, 0.5)
        commands.accept(r.delivery for r in got)
        seen.extend(str(r.message.id) for r in got)
        return "fresh" in seen

    try:
        wait_until(fresh_arrived, 30, "the fresh command")
        # one sender, one queue: had the stale command survived, it would have come first
        assert "stale" not in seen
    finally:
        commands.close()


def test_the_source_holds_credit_for_two_batches(stack: Mesh, tmp_path: Path) -> None:
    """A batch's deliveries stay unsettled until Spark commits it. With credit for two
    batches the next one is delivered meanwhile, so a backlog is read in full batches,
    not in the trickle that arrives after each commit."""
    batch = 600  # two batches are more than the consumer's own default credit (1000)
    readings = generate(seed=11, devices=3, rate=100, duration=3 * batch / 100)
    _simulate(stack, tmp_path, readings, address="events")
    options = {"url": stack.url(0, tls=True), "address": "events", "batchSize": str(batch)}
    reader = AmqpStreamReader(options | _account(stack, "backend@iot", tmp_path))
    read: list[str] = []

    def next_batch(offset: dict[str, int], held: int) -> dict[str, int]:
        inbox = reader.consumer.inbox
        wait_until(lambda: inbox.qsize() >= held, 30, f"{held} deliveries held by the reader")
        rows, end = reader.read(offset)  # accepts the batches before `offset`
        read.extend(row[0] for row in rows)
        assert end["seq"] - offset["seq"] == batch
        return end

    try:
        first = next_batch(reader.initialOffset(), 2 * batch)
        # the second batch was delivered while the first was unsettled
        second = next_batch(first, batch)
        reader.commit(next_batch(second, batch))
    finally:
        reader.stop()
    assert sorted(read) == sorted(r.id for r in readings)


def test_an_idle_source_ticks_for_a_while_after_its_last_message_then_stops(
    stack: Mesh, tmp_path: Path
) -> None:
    """Without messages the offset moves on every `idleTickMs` (Spark then runs the batch
    the silence timers need) until none has come for `idleTickForMs` (a start counts as
    one); then it stays, so an idle job runs no batch, until the next message."""
    window = 4.0
    options = {
        "url": stack.url(0, tls=True), "address": "events", "waitMs": "50",
        "idleTickMs": "200", "idleTickForMs": str(int(window * 1000)),
    }  # fmt: skip
    created = time.monotonic()
    reader = AmqpStreamReader(options | _account(stack, "backend@iot", tmp_path))
    offset = reader.initialOffset()

    def read_until(done: Any, what: str) -> None:
        nonlocal offset
        deadline = time.monotonic() + 30
        while not done():
            assert time.monotonic() < deadline, f"the source never {what}: {offset}"
            _, offset = reader.read(offset)

    try:
        read_until(lambda: offset.get("tick", 0) > 0, "ticked after its start")
        read_until(lambda: time.monotonic() > created + window, "reached its window's end")
        still = dict(offset)
        stop = time.monotonic() + 1.0  # five ticks' time
        while time.monotonic() < stop:
            _, offset = reader.read(offset)
        assert offset == still, "ticks stop once no message came for idleTickForMs"
        _simulate(stack, tmp_path, generate(seed=5, devices=1, rate=1, duration=1), "events")
        read_until(lambda: offset["seq"] > still["seq"], "read the new message")
        moved = offset["tick"]
        read_until(lambda: offset["tick"] > moved, "ticked again after a message")
        reader.commit(offset)
    finally:
        reader.stop()


def test_the_source_uses_the_first_router_that_answers_and_leaves_one_gone_silent(
    stack: Mesh,
) -> None:
    """The job's `--url` lists every router: one that refuses is skipped; one that falls
    silent (its host froze or lost power: no FIN, no RST) ends the consumer with an
    error after the heartbeat time, so the job restarts on the next router."""
    identity = "backend@iot"
    refusing = f"amqps://127.0.0.1:{free_port()}"
    urls = ",".join([refusing, stack.url(0, tls=True)])
    source = Source(urls, "events", identity, stack.passwords[identity], "iot", str(stack.ca))
    consumer = Consumer(source)
    router = stack.routers[0]
    assert router.process is not None
    try:
        assert consumer.take(1, 0.2) == []  # open, on router 0
        os.killpg(router.process.pid, signal.SIGSTOP)
        with pytest.raises(ConsumerError, match=r"127\.0\.0\.1"):
            wait_until(
                lambda: bool(consumer.take(1, 0.5)), 3 * HEARTBEAT_SECONDS, "the consumer to fail"
            )
    finally:
        os.killpg(router.process.pid, signal.SIGCONT)
        consumer.close()
