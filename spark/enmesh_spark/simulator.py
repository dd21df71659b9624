"""Device telemetry from a fixed seed, and the aggregates it must produce, computed in Python.

`generate` is deterministic: the same seed gives the same readings, ids, spikes and
malformed records, so a test can compare Spark's output with `expected_windows`.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from proton import Message

from enmesh.clients import Endpoint, send_messages

START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
MALFORMED_KINDS = ("not json", "no device", "temperature not a number", "timestamp in the future")
CENTURY_MS = 100 * 365 * 86_400_000  # how far ahead a broken clock is


@dataclass(frozen=True)
class Reading:
    id: str
    device: str
    ts_ms: int
    body: str
    temperature: float | None  # None: malformed
    spike: bool
    reason: str | None  # why a malformed record is quarantined


def generate(
    *,
    seed: int,
    devices: int,
    rate: float,
    duration: float,
    malformed: float = 0.0,
    spikes: float = 0.0,
    start_ms: int = START_MS,
    device_prefix: str = "dev",
) -> list[Reading]:
    """`rate` messages per second for `duration` seconds, round-robin over `devices`."""
    rng = random.Random(seed)
    base = [rng.uniform(15.0, 25.0) for _ in range(devices)]
    total = int(rate * duration)
    readings = []
    for i in range(total):
        device = f"{device_prefix}-{i % devices:04d}"
        ts_ms = start_ms + int(i * 1000 / rate)
        value = round(base[i % devices] + rng.gauss(0, 0.5), 3)
        spike = i >= devices * 20 and rng.random() < spikes  # after a baseline exists
        if spike:
            value = round(value + 40.0, 3)
        message_id = f"{device}-{ts_ms}"  # unique per device and time: runs never collide
        if rng.random() < malformed:
            kind = MALFORMED_KINDS[rng.randrange(len(MALFORMED_KINDS))]
            readings.append(
                Reading(message_id, device, ts_ms, _broken(kind, device, ts_ms), None, False, kind)
            )
            continue
        body = json.dumps(
            {"device": device, "ts": ts_ms, "metrics": {"temperature": value, "humidity": 40.0}}
        )
        readings.append(Reading(message_id, device, ts_ms, body, value, spike, None))
    return readings


def _broken(kind: str, device: str, ts_ms: int) -> str:
    if kind == "not json":
        return "{device: " + device
    if kind == "no device":
        return json.dumps({"ts": ts_ms, "metrics": {"temperature": 20.0}})
    if kind == "timestamp in the future":
        return json.dumps(
            {"device": device, "ts": ts_ms + CENTURY_MS, "metrics": {"temperature": 20.0}}
        )
    return json.dumps({"device": device, "ts": ts_ms, "metrics": {"temperature": "hot"}})


def percentile(values: list[float], fraction: float) -> float:
    """Linear interpolation between closest ranks (Spark's exact `percentile`)."""
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def expected_anomalies(
    readings: Iterable[Reading], baseline: int = 50, min_baseline: int = 10, threshold: float = 4.0
) -> set[str]:
    """Ids of readings more than `threshold` sample deviations from the device's previous
    `baseline` readings (at least `min_baseline` of them): the job's rule, in Python."""
    history: dict[str, list[float]] = defaultdict(list)
    found = set()
    ordered = sorted(
        (r for r in readings if r.temperature is not None), key=lambda r: (r.ts_ms, r.id)
    )
    for reading in ordered:
        previous = history[reading.device][-baseline:]
        if len(previous) >= min_baseline:
            mean = sum(previous) / len(previous)
            std = math.sqrt(sum((v - mean) ** 2 for v in previous) / (len(previous) - 1))
            if std > 0 and abs(reading.temperature - mean) / std > threshold:  # type: ignore[operator]
                found.add(reading.id)
        history[reading.device].append(reading.temperature)  # type: ignore[arg-type]
    return found


def expected_windows(
    readings: Iterable[Reading], window_ms: int = 60_000, slide_ms: int | None = None
) -> dict[tuple[str, int], dict[str, float]]:
    """(device, window start ms) -> count, mean, min, max, p95 of temperature, for windows
    of `window_ms` starting every `slide_ms` (default: tumbling)."""
    slide = slide_ms or window_ms
    groups: dict[tuple[str, int], list[float]] = defaultdict(list)
    for reading in readings:
        if reading.temperature is None:
            continue
        last = reading.ts_ms - reading.ts_ms % slide
        for start in range(last, reading.ts_ms - window_ms, -slide):
            groups[(reading.device, start)].append(reading.temperature)
    return {
        key: {
            "count": len(values),
            "mean": sum(values) / len(values),
            "min": min(values),
            "max": max(values),
            "p95": percentile(values, 0.95),
        }
        for key, values in groups.items()
    }


def messages(readings: Iterable[Reading]) -> list[Message]:
    """Each reading as a durable JSON message whose id is the reading id."""
    return [
        Message(
            id=reading.id,
            body=reading.body,
            durable=True,
            content_type="application/json",
            creation_time=reading.ts_ms / 1000,
        )
        for reading in readings
    ]


def send(
    readings: Sequence[Reading],
    *,
    url: str,
    address: str,
    user: str | None,
    password: str | None,
    ca: str | None,
    rate: float | None = None,
    timeout: float = 30,
    at_timestamps: bool = False,
) -> dict[str, int]:
    """Send the readings (at most `rate` per second when given; with `at_timestamps`, each
    when the clock reaches its timestamp, not that long after the link opens); returns how
    many had each outcome (accepted, rejected, released, modified)."""
    vhost = user.split("@", 1)[1] if user and "@" in user else None
    pace = 0.0 if rate is None else len(readings) / rate
    endpoint = Endpoint(
        url, address, user, password, vhost, None if ca is None else Path(ca), None, timeout + pace
    )
    start_at = readings[0].ts_ms / 1000 if at_timestamps and readings else None
    return dict(send_messages(endpoint, messages(readings), rate, start_at).outcomes)


def run(args: argparse.Namespace, endpoint: Endpoint) -> int:
    total_rate = args.devices * args.rate
    readings = generate(
        seed=args.seed, devices=args.devices, rate=total_rate, duration=args.duration,
        malformed=args.malformed, spikes=args.spikes,
        start_ms=int(time.time() * 1000) if args.start_ms is None else args.start_ms,
    )  # fmt: skip
    paced = None if args.no_pace else total_rate
    timeout = endpoint.timeout + (0 if paced is None else args.duration)
    every = args.progress or None
    print(
        f"sending {len(readings)} readings of {args.devices} devices to {endpoint.address}"
        + (f" at {total_rate:g}/s" if paced else " as fast as the mesh takes them")
        + (f"; progress every {every:g} s" if every else ""),
        file=sys.stderr, flush=True,
    )  # fmt: skip
    client = send_messages(
        replace(endpoint, timeout=timeout), messages(readings), paced, progress_every=every
    )
    malformed = sum(1 for r in readings if r.reason)
    spikes = sum(1 for r in readings if r.spike)
    outcomes = ", ".join(f"{n} {state}" for state, n in client.outcomes.items() if n)
    print(
        f"sent {client.sent} readings of {args.devices} devices to {endpoint.address} "
        f"({malformed} malformed, {spikes} spikes): {outcomes}"
    )
    return 0 if client.outcomes["accepted"] == len(readings) else 1
