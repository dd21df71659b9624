"""The MQTT gateway of a running stack (the mqtt_gateway role): supervised, listening on
its role's ports, and carrying a real paho-mqtt client's QoS 1 messages over TLS."""

from __future__ import annotations

import queue
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from enmesh.deploy.smoke import Stack

MQTT_PORT, MQTTS_PORT = 1883, 8883  # roles/mqtt_gateway/defaults/main.yml


def test_the_gateway_runs_and_listens(host: Any) -> None:
    assert host.supervisor("enmesh-mqtt-gateway").is_running
    listening = host.socket.get_listening_sockets()
    for port in (MQTT_PORT, MQTTS_PORT):
        assert f"tcp://127.0.0.1:{port}" in listening


def _client(stack: Stack, identity: str, client_id: str) -> tuple[mqtt.Client, queue.Queue[Any]]:
    events: queue.Queue[Any] = queue.Queue()
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5)
    client.username_pw_set(identity, stack.password(identity))
    client.tls_set(ca_certs=str(stack.ca))
    client.on_connect = lambda c, u, f, rc, p: events.put(("connack", rc.value))
    client.on_subscribe = lambda c, u, mid, rcs, p: events.put(("suback", [r.value for r in rcs]))
    client.on_publish = lambda c, u, mid, rc, p: events.put(("puback", rc.value))
    client.on_message = lambda c, u, m: events.put(("message", m.payload))
    client.connect("127.0.0.1", MQTTS_PORT)
    client.loop_start()
    return client, events


def test_qos1_over_tls_from_backend_to_device(stack: Stack) -> None:
    device, device_events = _client(stack, "device@iot", "e2e-device")
    backend, backend_events = _client(stack, "backend@iot", "e2e-backend")
    try:
        assert device_events.get(timeout=15) == ("connack", 0)
        assert backend_events.get(timeout=15) == ("connack", 0)
        device.subscribe("broadcast", 1)
        assert device_events.get(timeout=15) == ("suback", [1])
        backend.publish("broadcast", b"e2e over mqtts", qos=1)
        assert backend_events.get(timeout=15) == ("puback", 0)
        assert device_events.get(timeout=15) == ("message", b"e2e over mqtts")
    finally:
        for client in (device, backend):
            client.disconnect()
            client.loop_stop()
