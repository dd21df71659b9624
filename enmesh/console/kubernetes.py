"""The console of a stack on Kubernetes (`enmesh-console --kubernetes`, docs/kubernetes.md).

There the model changes with `pulumi up`, from the model files in git: there is no host
for `enmesh apply` to install files on, no supervisord and no `rabbitmqctl`. So the
console's apply target refuses, and every change (address, user, password) is refused
before anything is written, with a message that says where changes go. Reads work as on
hosts: the model (a ConfigMap), each router pod's management, Prometheus; closing a
connection is a management write to a router and works too. Messages stored come from
the Prometheus that scrapes RabbitMQ's per-queue metrics (`/metrics/detailed`), or are
unknown without one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from enmesh.compile.layout import STANDARD_BROKER_VHOST
from enmesh.console import charts
from enmesh.control.errors import ApplyRefused
from enmesh.control.target import Target
from enmesh.model import SpaceType, Tenant

log = logging.getLogger("enmesh.console")
QUEUE_METRIC = "rabbitmq_detailed_queue_messages"  # ready + unacknowledged, per queue

StoredMessages = Callable[[Tenant], dict[str, int] | None]


def refusing_target(stack: str) -> Callable[[], Target]:
    """The console's `target()` on Kubernetes: always the refusal, never a target."""

    def target() -> Target:
        raise ApplyRefused(
            f"on Kubernetes the model changes with `pulumi up`: change the stack's model "
            f"files in git and run `pulumi up -s {stack}`; this console reads the stack and "
            "closes connections, it applies nothing"
        )

    return target


def queue_query(tenant: Tenant) -> str:
    """PromQL: messages per queue of the tenant's broker vhost, summed over the brokers'
    nodes as the stack's rule `enmesh:queue_messages` sums them."""
    standard = tenant.space.spec.type is SpaceType.STANDARD
    vhost = STANDARD_BROKER_VHOST if standard else tenant.name  # [a-z0-9-]: safe in quotes
    return f'sum by (queue) ({QUEUE_METRIC}{{vhost="{vhost}"}})'


def stored_from_samples(vector: list[Any]) -> dict[str, int]:
    """Queue -> messages, from an instant query's vector (see `queue_query`)."""
    return {
        str(sample["metric"]["queue"]): int(float(sample["value"][1]))
        for sample in vector
        if "queue" in sample.get("metric", {})
    }


def stored_messages(prometheus: str | None) -> StoredMessages:
    """The console's count of messages stored: from `prometheus`; None (unknown) without
    one or when it cannot be read (logged), never a count it does not have."""

    def stored(tenant: Tenant) -> dict[str, int] | None:
        if prometheus is None:
            return None
        try:
            return stored_from_samples(charts.instant(prometheus, queue_query(tenant)))
        except charts.PrometheusError as exc:
            log.warning("messages stored unknown: %s", exc)
            return None

    return stored
