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
        url = f"http://{broker['host']}:{broker['ports']['prometheus']}/metrics/detailed?{query}"
        try:
            with urllib.request.urlopen(url, timeout=TIMEOUT) as response:
                text = response.read().decode("utf-8")
        except OSError as exc:
            where = f"broker {broker['name']} ({url})"
            raise DepthUnknown(f"cannot read queue depths from {where}: {exc}") from exc
        for queue, messages in parse(text, vhost).items():
            total[queue] = total.get(queue, 0) + messages
    return total
