"""The MQTT gateway and will service: MQTT 3.1.1 / 5.0 devices as AMQP clients of the mesh.

See docs/mqtt.md. Run it with `enmesh-mqtt-gateway` or `python -m enmesh.mqtt`.
"""
