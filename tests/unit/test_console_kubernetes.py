"""The console on Kubernetes counts messages stored from Prometheus (RabbitMQ's per-queue
`rabbitmq_detailed_queue_messages`, as the stack's rules read it), says "unknown" rather
than a count it does not have, and its apply target always refuses."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from enmesh.console import charts
from enmesh.console.kubernetes import (
    queue_query,
    refusing_target,
    stored_from_samples,
    stored_messages,
)
from enmesh.control.errors import ApplyRefused
from enmesh.model import Tenant, load_model
from tests.support.mesh import SAMPLE_MODEL

# `sum by (queue) (rabbitmq_detailed_queue_messages{vhost="enmesh"})` as Prometheus 2.x
# answers it: one sample per queue, the value a string.
SAMPLES: list[dict[str, Any]] = [
    {"metric": {"queue": "iot/events"}, "value": [1735689600.0, "3"]},
    {"metric": {"queue": "iot/dlq"}, "value": [1735689600.0, "0"]},
    {"metric": {"queue": "iot/readings"}, "value": [1735689600.0, "1.2e3"]},
    {"metric": {}, "value": [1735689600.0, "7"]},  # no queue label: not a queue's count
]


def _tenant(name: str) -> Tenant:
    return next(t for t in load_model([SAMPLE_MODEL]).tenants if t.name == name)


def test_samples_become_counts_per_queue() -> None:
    assert stored_from_samples(SAMPLES) == {"iot/events": 3, "iot/dlq": 0, "iot/readings": 1200}
    assert stored_from_samples([]) == {}


def test_the_query_reads_the_spaces_broker_vhost() -> None:
    query = queue_query(_tenant("iot"))
    assert query == 'sum by (queue) (rabbitmq_detailed_queue_messages{vhost="enmesh"})'


def test_stored_messages_come_from_prometheus(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[str, str]] = []

    def instant(base: str, query: str) -> list[Any]:
        asked.append((base, query))
        return SAMPLES

    monkeypatch.setattr(charts, "instant", instant)
    found = stored_messages("http://prometheus.test:9090")(_tenant("iot"))
    assert found == {"iot/events": 3, "iot/dlq": 0, "iot/readings": 1200}
    assert asked == [("http://prometheus.test:9090", queue_query(_tenant("iot")))]


def test_without_prometheus_or_an_answer_the_count_is_unknown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert stored_messages(None)(_tenant("iot")) is None
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        nobody = f"http://127.0.0.1:{probe.getsockname()[1]}"  # bound, not listening
        assert stored_messages(nobody)(_tenant("iot")) is None

    def refused(base: str, query: str) -> list[Any]:
        raise charts.PrometheusError(f"Prometheus at {base}: bad_data")

    monkeypatch.setattr(charts, "instant", refused)
    assert stored_messages("http://prometheus.test:9090")(_tenant("iot")) is None


def test_the_apply_target_refuses_and_says_where_changes_go() -> None:
    with pytest.raises(ApplyRefused, match=r"on Kubernetes the model changes with `pulumi up`"):
        refusing_target("aws")()
    with pytest.raises(ApplyRefused, match=r"pulumi up -s aws"):
        refusing_target("aws")()
