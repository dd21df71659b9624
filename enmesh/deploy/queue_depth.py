"""How many messages the brokers' queues hold, read from RabbitMQ's Prometheus endpoint.

The smoke check must know that a store is empty without attaching to it: on RabbitMQ
3.10 a quorum queue counts every message given back (released) as a delivery attempt,
so a look at someone else's message moves it towards the dead-letter queue.
"""

from __future__ import annotations

import re
import urllib.parse
import urllib.request
from collections.abc import Iterable
from typing import Any

from enmesh.compile.layout import STANDARD_BROKER_VHOST

TIMEOUT = 10.0
_SAMPLE = re.compile(
    r"^rabbitmq_detailed_queue_messages\{(?P<labels>[^}]*)\} (?P<value>[0-9.eE+-]+)$"
)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


class DepthUnknown(Exception):  # noqa: N818 (a reason to skip, raised to the caller)
    """A broker's queue depths could not be read; the message says which and why."""


def parse(metrics: str, vhost: str = STANDARD_BROKER_VHOST) -> dict[str, int]:
    """Queue -> messages (ready and unacknowledged) in `vhost`, from the text format."""
    depths: dict[str, int] = {}
    for line in metrics.splitlines():
        sample = _SAMPLE.match(line)
        if sample is None:
            continue
        labels = dict(_LABEL.findall(sample["labels"]))
        if labels.get("vhost") == vhost and "queue" in labels:
            depths[labels["queue"]] = int(float(sample["value"]))
    return depths


def read(brokers: Iterable[dict[str, Any]], vhost: str = STANDARD_BROKER_VHOST) -> dict[str, int]:
    """Queue -> messages over every broker (a partitioned queue is on several)."""
    total: dict[str, int] = {}
    query = urllib.parse.urlencode({"vhost": vhost, "family": "queue_coarse_metrics"})
    for broker in brokers:
        for queue, messages in _broker_depths(broker, query, vhost).items():
            total[queue] = total.get(queue, 0) + messages
    return total


def _broker_depths(broker: dict[str, Any], query: str, vhost: str) -> dict[str, int]:
    """A cluster's queues are reported by the nodes that lead them; a node that is down
    leads none (its queues elected leaders elsewhere), so one answer is enough."""
    found: dict[str, int] = {}
    failures = []
    hosts = node_hosts(broker)
    for host in hosts:
        url = f"http://{host}:{broker['ports']['prometheus']}/metrics/detailed?{query}"
        try:
            with urllib.request.urlopen(url, timeout=TIMEOUT) as response:
                text = response.read().decode("utf-8")
        except OSError as exc:
            failures.append(f"{url}: {exc}")
            continue
        for queue, messages in parse(text, vhost).items():
            found[queue] = found.get(queue, 0) + messages
    if len(failures) == len(hosts):
        where = f"broker {broker['name']} ({'; '.join(failures)})"
        raise DepthUnknown(f"cannot read queue depths from {where}")
    return found


def node_hosts(broker: dict[str, Any]) -> list[str]:
    """Hosts of a broker's RabbitMQ nodes (deploy.json); a queue's figures come from the
    node that leads it, so a cluster is read on every node."""
    return [node["host"] for node in broker.get("nodes") or [{"host": broker["host"]}]]
