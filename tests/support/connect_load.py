"""Connection set-up load: many AMQP connections opened and closed as fast as a router
admits them, from several client processes, so that the router (and what it asks, such as
enmesh-auth and Keycloak) is the limit rather than the client.

Each process runs one proton container that keeps `concurrency` connections in their
handshake at once (TCP, TLS, SASL, AMQP open) and closes each as soon as the router's open
arrives. One TLS domain serves all of a process's connections, as a long-running client's
would: building one costs ~17 ms, more than the handshake it serves.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proton.handlers import MessagingHandler
from proton.reactor import Container

from tests.support.amqp import Account


@dataclass
class ChurnResult:
    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    cpu_seconds: float = 0.0  # the client process's own


class _Churn(MessagingHandler):  # type: ignore[misc]
    def __init__(self, options: dict[str, Any], count: int, concurrency: int) -> None:
        super().__init__(prefetch=0)
        self.options, self.count, self.concurrency = options, count, concurrency
        self.started = 0
        self.opened_at: dict[Any, float] = {}
        self.result = ChurnResult()

    def on_start(self, event: Any) -> None:
        for _ in range(min(self.concurrency, self.count)):
            self._open(event.container)

    def _open(self, container: Container) -> None:
        self.started += 1
        connection = container.connect(**self.options)
        self.opened_at[connection] = time.monotonic()

    def on_connection_opened(self, event: Any) -> None:
        started = self.opened_at.pop(event.connection, None)
        if started is not None:
            self.result.latencies.append(time.monotonic() - started)
        event.connection.close()

    def on_transport_error(self, event: Any) -> None:
        condition = event.transport.condition
        self.result.errors.append(f"{condition.name}: {condition.description}")
        self.opened_at.pop(event.connection, None)

    def on_transport_closed(self, event: Any) -> None:
        if self.started < self.count:
            self._open(event.container)


def _churn_in_process(account: Account, count: int, concurrency: int) -> ChurnResult:
    options = account.options()  # one TLS domain for every connection of this process
    handler = _Churn(options, count, concurrency)
    started = time.process_time()
    Container(handler).run()
    handler.result.cpu_seconds = time.process_time() - started
    return handler.result


@dataclass(frozen=True)
class LoadFigures:
    connections: int
    errors: list[str]
    seconds: float
    per_s: float
    p50_ms: float
    p99_ms: float
    client_cpu_ms_per_connection: float  # what the clients spent: are they the limit?

    def summary(self) -> dict[str, Any]:
        return {
            "connections": self.connections,
            "errors": len(self.errors),
            "per_s": round(self.per_s, 1),
            "p50_ms": round(self.p50_ms, 1),
            "p99_ms": round(self.p99_ms, 1),
            "client_cpu_ms_per_connection": round(self.client_cpu_ms_per_connection, 2),
        }


def churn(account: Account, count: int, processes: int, concurrency: int) -> LoadFigures:
    """Open and close `count` connections as `account`, spread over `processes` client
    processes each keeping `concurrency` handshakes in flight."""
    shares = [count // processes + (1 if n < count % processes else 0) for n in range(processes)]
    context = multiprocessing.get_context("spawn")  # a fresh proton per process
    with ProcessPoolExecutor(processes, mp_context=context) as pool:
        pool.submit(time.monotonic).result()  # the processes exist before the clock starts
        started = time.monotonic()
        futures = [pool.submit(_churn_in_process, account, share, concurrency) for share in shares]
        results = [future.result() for future in futures]
        elapsed = time.monotonic() - started
    latencies = sorted(latency for result in results for latency in result.latencies)
    errors = [error for result in results for error in result.errors]
    if not latencies:
        raise AssertionError(f"no connection opened: {errors[:3]}")
    return LoadFigures(
        connections=len(latencies),
        errors=errors,
        seconds=elapsed,
        per_s=len(latencies) / elapsed,
        p50_ms=statistics.median(latencies) * 1000,
        p99_ms=latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
        client_cpu_ms_per_connection=sum(r.cpu_seconds for r in results) / len(latencies) * 1000,
    )


def cpu_seconds(pid: int) -> float:
    """User + system CPU a process has used so far (its threads included), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / _CLOCK_TICKS


def churn_costing(
    account: Account, count: int, processes: int, concurrency: int, pids: list[int]
) -> tuple[LoadFigures, list[float]]:
    """`churn`, and the CPU seconds each of `pids` (server processes) spent per connection
    opened meanwhile."""
    before = [cpu_seconds(pid) for pid in pids]
    figures = churn(account, count, processes, concurrency)
    spent = [cpu_seconds(pid) - begin for pid, begin in zip(pids, before, strict=True)]
    return figures, [seconds / max(figures.connections, 1) for seconds in spent]


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
