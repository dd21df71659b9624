"""What the site checks' AMQP clients share: who they are, where they connect, how a
producer counts an acknowledgement."""

from __future__ import annotations

import itertools
import urllib.request
from typing import Any

from proton import Delivery, Message
from proton.utils import SendException

SPACE = "iot"
SENDER, RECEIVER = "device@iot", "backend@iot"


def router_url(deployment: dict[str, Any], address: str) -> str:
    """The amqps URL of the (first) router on the host at `address`."""
    router = next(r for r in deployment["routers"] if r["host"] == address)
    return f"amqps://{address}:{router['ports']['amqps']}"


def router_metrics(router: dict[str, Any]) -> str:
    """The router's /metrics text (OSError if it does not answer)."""
    url = f"http://{router['host']}:{router['ports']['metrics']}/metrics"
    with urllib.request.urlopen(url, timeout=5) as got:
        return str(got.read().decode())


def send_until_accepted(sender: Any, body: str, retries: list[str]) -> None:
    """Send one durable message again until the mesh accepts it (at least once).

    proton's blocking send returns normally on MODIFIED, which the router answers for a
    copy lost in flight (a broker node's connection cut by a power failure), and raises
    on RELEASED: neither is an acknowledgement. Each resend is recorded in `retries`.
    """
    while True:
        try:
            delivery = sender.send(Message(body=body, durable=True))
        except SendException as exc:
            retries.append(f"outcome {exc.state}")
            continue
        if delivery.remote_state == Delivery.ACCEPTED:
            return
        retries.append(f"outcome {delivery.remote_state}")


def longest_wait(since: float, acknowledged: list[tuple[float, str]]) -> float:
    """The longest time a producer waited for an acknowledgement after `since` (its
    acknowledgements as (monotonic time, body))."""
    times = [since] + [t for t, _ in acknowledged if t > since]
    return max((b - a for a, b in itertools.pairwise(times)), default=0.0)
