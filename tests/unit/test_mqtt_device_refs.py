"""A device that leaves its user's shared AMQP connection is collected: proton's records
of its session and links point back at it only weakly. A strong reference there is a
cycle through proton's C side, which Python's collector cannot see: every departed
device's session, links and deliveries stayed for as long as the connection did."""

from __future__ import annotations

import gc
import weakref
from typing import Any

from proton import Connection

from enmesh.mqtt.connections import MeshConnections, _device
from enmesh.mqtt.mesh import MeshClient, RouterEndpoint
from enmesh.router.engine import Loop


class Owner:
    """The MQTT side: nothing happens on a connection without a peer."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args: None


def test_a_departed_device_is_collected_while_its_connection_lives() -> None:
    loop = Loop()
    try:
        pool = MeshConnections(loop, RouterEndpoint("amqp://127.0.0.1:1"))
        connection = Connection()  # the user's connection, which outlives the device
        device = MeshClient(pool, Owner(), name="mqtt/iot/d1")
        device.session = connection.session()
        device.session.mqtt_client = device.ref
        device.session.open()
        device.publish("telemetry", b"payload", 1, 1)  # a sender, its message queued
        device.subscribe("broadcast")  # a receiver
        sender = device.senders["telemetry"]
        assert _device(sender) is device  # events on its links find it while it lives
        gone = weakref.ref(device)
        del device, sender
        gc.collect()
        assert gone() is None
        links = connection.link_head(0)
        assert links is not None and _device(links) is None
    finally:
        loop.selector.close()
