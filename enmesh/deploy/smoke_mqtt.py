"""The smoke check's MQTT step: one QoS 1 message through each MQTT gateway.

For the first anycast address of each standard space, a device that may receive from it
subscribes over the gateway and a device that may send to it publishes one message with
a fresh nonce, both with the model's credentials (paho-mqtt, MQTT 5, over the gateway's
TLS listener with the stack's CA when it has one). The publisher's PUBACK comes only
once the subscriber's session accepted the message (end to end through the mesh, as the
gateway promises for direct addresses), so the check waits for both. Gateways come from
endpoints.json (the mqtt_gateway role records their listeners); one that listens only on
its host's loopback while the routers are elsewhere cannot be reached from the deployer
and is reported as skipped.
"""

from __future__ import annotations

import ipaddress
import json
import queue
import secrets
from collections.abc import Iterator
from functools import partial
from typing import Any
from urllib.parse import urlsplit

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from enmesh.deploy.smoke import TIMEOUT, Access, Check, NotApplicable, Skipped, SmokeError, Stack

NO_MATCHING_SUBSCRIBERS = 0x10  # a PUBACK that delivered to no one


def mqtt_checks(stack: Stack) -> Iterator[Check]:
    endpoints_file = stack.build_dir / "endpoints.json"
    if not endpoints_file.is_file():
        return
    gateways = json.loads(endpoints_file.read_text(encoding="utf-8")).get("mqtt") or []
    standard = {u["space"] for u in stack.deployment["users"]}
    anycast: dict[str, str] = {}
    for entry in stack.deployment["addresses"]:
        if entry["space"] in standard and entry["type"] == "anycast":
            anycast.setdefault(entry["space"], entry["address"])
    for gateway in gateways:
        url = _url(gateway["urls"])
        for space, address in sorted(anycast.items()):
            run = partial(_through_gateway, stack, url, gateway["host"], space, address)
            yield Check("mqtt", space, address, run)


def _url(urls: list[str]) -> str | None:
    """The gateway listener the check uses: TLS if it has one, else plain TCP."""
    by_scheme = {urlsplit(url).scheme: url for url in urls}
    return by_scheme.get("mqtts") or by_scheme.get("mqtt")


def _reachable(stack: Stack, host: str) -> bool:
    """A loopback listener is reachable from here only if the routers are local too."""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    routers = [r["host"] for r in stack.deployment["routers"]]
    return not loopback or all(r in ("127.0.0.1", "localhost", "::1") for r in routers)


def _through_gateway(stack: Stack, url: str | None, gateway: str, space: str, address: str) -> str:
    if url is None:
        raise Skipped(f"the gateway on {gateway} has no mqtt or mqtts listener")
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port or 0
    if not _reachable(stack, host):
        raise Skipped(f"the gateway on {gateway} listens on {host} only: not reachable here")
    access = Access.of_space(stack.build_dir, space)
    sender, receiver = access.sender(address), access.receiver(address)
    if sender is None or receiver is None:
        raise NotApplicable(f"no user may {'send to' if sender is None else 'receive from'} it")
    device = partial(_Device, stack, host, port, parts.scheme == "mqtts")
    nonce = secrets.token_hex(8)
    with device(receiver) as subscriber, device(sender) as publisher:
        subscriber.subscribe(address)
        reason = publisher.publish(address, f"smoke {nonce}".encode())
        if reason == NO_MATCHING_SUBSCRIBERS:
            raise SmokeError(f"{url}: PUBACK 0x10, no subscriber got it (the mesh released it)")
        got = subscriber.received()
        if got != f"smoke {nonce}".encode():
            raise SmokeError(f"{url}: the subscriber got {got!r}, not the smoke message")
    return f"QoS 1 through {url}: PUBACK after the subscriber's"


class _Device:
    """One paho-mqtt client, connected, its callbacks turned into queue entries."""

    def __init__(self, stack: Stack, host: str, port: int, tls: bool, identity: str) -> None:
        self.events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.host, self.port = host, port
        self.where = f"{identity} at {host}:{port}"
        client = mqtt.Client(
            CallbackAPIVersion.VERSION2,
            client_id=f"enmesh-smoke-{secrets.token_hex(4)}",
            protocol=mqtt.MQTTv5,
        )
        client.username_pw_set(identity, stack.password(identity))
        if tls:
            client.tls_set(ca_certs=str(stack.ca))
        client.on_connect = lambda _c, _u, _f, reason, _p: self.events.put(("connack", reason))
        client.on_subscribe = lambda _c, _u, _m, reasons, _p: self.events.put(("suback", reasons))
        client.on_publish = lambda _c, _u, _m, reason, _p: self.events.put(("puback", reason))
        client.on_message = lambda _c, _u, message: self.events.put(("message", message.payload))
        self.client = client

    def __enter__(self) -> _Device:
        try:
            self.client.connect(self.host, self.port, keepalive=int(TIMEOUT))
        except OSError as exc:
            raise SmokeError(f"{self.where}: cannot connect: {exc}") from exc
        self.client.loop_start()
        reason = self._next("connack")
        if reason.is_failure:
            raise SmokeError(f"{self.where}: CONNACK {reason}")
        return self

    def __exit__(self, *_: object) -> None:
        self.client.disconnect()
        self.client.loop_stop()

    def _next(self, kind: str) -> Any:
        try:
            found, value = self.events.get(timeout=TIMEOUT)
        except queue.Empty:
            raise SmokeError(f"{self.where}: no {kind} within {TIMEOUT:.0f}s") from None
        if found != kind:
            raise SmokeError(f"{self.where}: {found} while waiting for {kind}")
        return value

    def subscribe(self, topic: str) -> None:
        self.client.subscribe(topic, qos=1)
        (granted,) = self._next("suback")
        if granted.is_failure:
            raise SmokeError(f"{self.where}: SUBACK {granted} for {topic}")

    def publish(self, topic: str, payload: bytes) -> int:
        self.client.publish(topic, payload, qos=1)
        reason = self._next("puback")
        if reason.is_failure:
            raise SmokeError(f"{self.where}: PUBACK {reason} for {topic}")
        return int(reason.value)

    def received(self) -> bytes:
        return bytes(self._next("message"))
