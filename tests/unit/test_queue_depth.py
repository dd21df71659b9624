"""Queue depths from RabbitMQ's Prometheus text format (what the smoke check reads)."""

from __future__ import annotations

import pytest

from enmesh.deploy import queue_depth
from tests.support.ports import free_port

SAMPLE = """\
# TYPE rabbitmq_detailed_queue_messages gauge
# HELP rabbitmq_detailed_queue_messages Sum of ready and unacknowledged messages
rabbitmq_detailed_queue_messages_ready{vhost="enmesh",queue="iot.audit"} 2
rabbitmq_detailed_queue_messages{vhost="enmesh",queue="iot.audit"} 3
rabbitmq_detailed_queue_messages{queue="iot.dlq",vhost="enmesh"} 0
rabbitmq_detailed_queue_messages{vhost="acme",queue="orders"} 7
rabbitmq_detailed_queue_messages{vhost="enmesh",queue="iot.events"} 1.0
"""


def test_depths_of_the_vhost_ready_and_unacknowledged() -> None:
    assert queue_depth.parse(SAMPLE) == {"iot.audit": 3, "iot.dlq": 0, "iot.events": 1}
    assert queue_depth.parse(SAMPLE, vhost="acme") == {"orders": 7}


def test_an_unreachable_broker_is_named() -> None:
    port = free_port()  # nothing listens there
    broker = {"name": "broker-0", "host": "127.0.0.1", "ports": {"prometheus": port}}
    with pytest.raises(queue_depth.DepthUnknown, match=f"broker broker-0 .*:{port}/"):
        queue_depth.read([broker])
