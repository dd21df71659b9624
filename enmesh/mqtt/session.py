"""One MQTT client: its packets in, the mesh's answers out, as MQTT 3.1.1 or 5.0.

Independent of the byte transport (TCP, TLS, WebSocket): the transport calls `feed` with
what arrived and `transport_lost` when it ended; the session writes through `Transport`.
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from typing import TYPE_CHECKING, Any, Protocol

from proton import Delivery

from enmesh.mqtt import convert, packets, persistence
from enmesh.mqtt.codec import Decoder, MalformedPacket, UnsupportedVersion
from enmesh.mqtt.mesh import LINGER_SECONDS, PAUSE_AT, RESUME_AT, MeshClient
from enmesh.mqtt.packets import (
    Connect,
    Disconnect,
    Packet,
    PingReq,
    PubAck,
    Publish,
    Subscribe,
    Unsubscribe,
)
from enmesh.mqtt.subscribing import Subscriptions
from enmesh.mqtt.wills import WILL_TOKENS
from enmesh.router.engine import Timer

if TYPE_CHECKING:
    from enmesh.mqtt.gateway import Gateway

log = logging.getLogger("enmesh.mqtt.session")

RECEIVE_MAXIMUM = 100  # QoS 1 and 2 publishes a 5.0 client may have unacknowledged
WRITE_BACKLOG = 256 * 1024  # bytes queued to a device before its subscriptions stop taking
_ids = itertools.count(1)


class Transport(Protocol):
    def write(self, data: bytes) -> None: ...
    def close(self) -> None: ...
    def backlog(self) -> int: ...
    def pause(self, paused: bool) -> None: ...
    def hand_to(self, session: Session) -> None: ...


class Session:
    # Slots, not a __dict__: 10,000 devices hold 10,000 sessions, and the dict of these
    # attributes was about 1.6 KB of each (tracemalloc over 800 devices connecting).
    __slots__ = (
        "assigned_id",
        "clean_end",
        "closed",
        "connect",
        "connect_timer",
        "decoder",
        "deferred",
        "eof",
        "expiry",
        "gateway",
        "held",
        "identity",
        "keep_alive",
        "keep_will",
        "linger",
        "mesh",
        "next_packet_id",
        "offline",
        "parked",
        "paused",
        "peer",
        "qos2_forwarding",
        "qos2_received",
        "qos2_released",
        "ready",
        "replaced",
        "retain_pending",
        "space",
        "subscriptions",
        "to_device",
        "transport",
        "will_publisher",
    )

    def __init__(self, gateway: Gateway, transport: Transport, peer: str) -> None:
        self.gateway, self.transport, self.peer = gateway, transport, peer
        self.decoder = Decoder(gateway.settings.max_packet_size)
        self.connect: Connect | None = None
        self.mesh: MeshClient | None = None
        self.ready = False  # CONNACK sent with success
        self.closed = False
        self.clean_end = False  # DISCONNECT received: no will
        self.keep_will = False  # the mesh went away: the will stays stored
        self.eof = False  # the device hung up while packets of its were still held
        self.paused = False  # not reading the device: the mesh has not taken its publishes
        self.held: deque[Packet] = deque()  # decoded, not yet handled (see run_held)
        self.subscriptions = Subscriptions(self)
        # QoS 1/2 sent to the device, until it acknowledges: the mesh delivery to settle
        # then (None: a retained message) and the PUBLISH (sent again with DUP on resume).
        self.to_device: dict[int, tuple[Delivery | None, Publish]] = {}
        # QoS 2 (MQTT 4.3.3): the device's publishes the mesh has not settled yet, those
        # answered with PUBREC until the device's PUBREL (a repeat is not forwarded again),
        # and ours answered with PUBREC, PUBREL sent, until the device's PUBCOMP.
        self.qos2_forwarding: set[int] = set()
        self.qos2_received: set[int] = set()
        self.qos2_released: set[int] = set()
        self.retain_pending: dict[str, Publish] = {}  # retained, until the mesh allows the topic
        self.deferred: list[Delivery] = []  # QoS 0 written, settled once the backlog drains
        self.next_packet_id = 1
        self.keep_alive: Timer | None = None
        self.identity = ""
        self.space = ""
        self.assigned_id = False
        # A persistent session outlives its connection (enmesh.mqtt.persistence): parked,
        # it holds what arrives for the device unsettled until it comes back or expires.
        self.parked = False
        self.replaced = False  # taken over by a clean session: it ends, it is not parked
        # a list, not a deque: only appended to and read whole (an empty deque is 760 B)
        self.offline: list[tuple[str, Delivery | None, bytes]] = []  # encoded messages
        self.expiry: Timer | None = None
        self.linger: Timer | None = None  # a lost connection's last packets, then the end
        self.will_publisher: Any = None  # wills.py: publishing this parked session's will
        self.gateway.sessions_open += 1
        self.connect_timer: Timer | None = gateway.loop.call_later(
            gateway.settings.connect_timeout, lambda: self._close("no CONNECT in time")
        )

    @property
    def version(self) -> int:
        return self.decoder.version or 4

    # --- input -------------------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        if self.closed:
            return
        self.touch()
        try:
            self.held.extend(self.decoder.feed(data))
        except UnsupportedVersion as exc:
            self._refuse_connect(exc.reason, str(exc))
        except MalformedPacket as exc:
            self.held.extend(exc.decoded)  # what came before the bad packet still counts
            self.run_held()
            self._protocol_failure(exc.reason, str(exc))
        else:
            self.run_held()

    def run_held(self) -> None:
        """Handle what arrived, in order, unless waiting for the mesh (its answer to the
        CONNECT, or its credit while the device is paused)."""
        while self.held and not self.closed and not self.paused:
            if self.connect is not None and not self.ready:
                return
            self._handle(self.held.popleft())
        if self.eof and not self.held:
            self._close("connection lost")

    def _handle(self, packet: Packet) -> None:
        if isinstance(packet, Connect):
            self._on_connect(packet)
        elif isinstance(packet, Publish):
            self._on_publish(packet)
        elif isinstance(packet, PubAck):
            self._on_ack(packet)
        elif isinstance(packet, Subscribe):
            self._on_subscribe(packet)
        elif isinstance(packet, Unsubscribe):
            self._on_unsubscribe(packet)
        elif isinstance(packet, PingReq):
            self.transport.write(packets.PINGRESP_BYTES)
        elif isinstance(packet, Disconnect):
            self._on_disconnect(packet)

    def _on_disconnect(self, packet: Disconnect) -> None:
        assert self.connect is not None
        interval = packet.props.get("session_expiry")
        if interval is not None:
            if not self.connect.props.get("session_expiry") and interval:
                # MQTT-3.14.2-2: a session that was to end with its connection stays so.
                self._protocol_failure(0x82, "session expiry set on DISCONNECT, not CONNECT")
                return
            self.connect.props["session_expiry"] = interval
        # 5.0 reason 0x04: "disconnect with will message" keeps the will.
        self.clean_end = packet.reason != 0x04
        self._close("client disconnected")

    def touch(self) -> None:
        if self.keep_alive is not None:
            self.keep_alive.cancel()
        seconds = self.connect.keep_alive if self.connect else 0
        if seconds:  # MQTT-3.1.2-24: one and a half times the keep alive
            self.keep_alive = self.gateway.loop.call_later(seconds * 1.5, self._expired)

    def _expired(self) -> None:
        if self.paused:  # its PINGREQs wait unread behind its publishes
            self.touch()
            return
        self._protocol_failure(packets.KEEP_ALIVE_TIMEOUT, "keep alive expired")

    # --- CONNECT -------------------------------------------------------------------------

    def _on_connect(self, connect: Connect) -> None:
        if self.connect_timer is not None:
            self.connect_timer.cancel()
        self.connect = connect
        self.touch()
        if connect.version == 5 and "auth_method" in connect.props:
            self._refuse_connect(0x8C, "enhanced authentication is not offered")
            return
        user = connect.username or ""
        if "@" not in user or connect.password is None:
            self._refuse_connect(
                packets.BAD_CREDENTIALS, "user name must be <user>@<space>, with a password"
            )
            return
        if not connect.client_id:
            if connect.version == 4 and not connect.clean:
                self._refuse_connect(packets.CLIENT_ID_INVALID, "empty client id needs clean")
                return
            connect.client_id = f"enmesh-{next(_ids)}"
            self.assigned_id = True
        self.identity = user
        space = self.space = user.rsplit("@", 1)[1]
        try:
            password = connect.password.decode("utf-8")
        except UnicodeDecodeError:
            self._refuse_connect(packets.BAD_CREDENTIALS, "password is not UTF-8")
            return
        self.mesh = MeshClient(
            self.gateway.connections, self, name=f"mqtt/{space}/{connect.client_id}"
        )
        self.mesh.open(user, password, space)

    def on_mesh_open(self) -> None:
        assert self.connect is not None
        if self.closed:
            return
        kept = self.gateway.take_over(self)
        if kept is not None:  # clean start 0: that session carries on over this connection
            persistence.resume(kept, self)
            return
        if self.connect.will is not None:
            self.gateway.wills.remember(self)  # on disk before the device hears success
        self.transport.write(packets.connack(self.version, False, packets.SUCCESS, self.props()))
        self.ready = True
        self.run_held()

    def props(self) -> dict[str, Any]:
        """CONNACK properties (5.0): what this gateway offers."""
        assert self.connect is not None
        props: dict[str, Any] = {}
        if self.connect.version == 5:
            props = {
                "receive_maximum": RECEIVE_MAXIMUM,
                "subscription_id_available": 0,
                "shared_available": 0,
                "maximum_packet_size": self.gateway.settings.max_packet_size,
            }
            if not self.gateway.addresses.enabled:
                props["wildcard_available"] = 0
            if self.assigned_id:
                props["assigned_client_id"] = self.connect.client_id
            requested = int(self.connect.props.get("session_expiry", 0))
            kept = persistence.expiry_seconds(
                self.connect, self.gateway.settings.max_session_expiry
            )
            if requested and kept < requested:  # MQTT 5 3.2.2.3.2: the server's own value
                props["session_expiry"] = int(kept)
        return props

    def on_mesh_refused(self, reason: int, text: str) -> None:
        self._refuse_connect(reason, text)

    def on_mesh_lost(self, text: str) -> None:
        if self.parked:  # a router restart, the user removed: the session cannot go on
            log.info("parked session of %s ended: %s", self.identity, text)
            persistence.discard(self)
            return
        if not self.ready:
            self._refuse_connect(packets.SERVER_UNAVAILABLE, text)
            return
        if self.version == 5:
            self.transport.write(packets.disconnect(packets.SERVER_UNAVAILABLE, text))
        # The will cannot go out without the mesh: it stays stored, for the will account
        # at the gateway's next start, unless the device reconnects first (a new CONNECT
        # replaces it).
        self.clean_end = self.keep_will = True
        self._close(f"mesh connection lost: {text}")

    def _refuse_connect(self, reason: int, text: str) -> None:
        log.info("CONNECT from %s (%s) refused: %s", self.peer, self.identity or "-", text)
        self.gateway.refusals += 1
        # An unknown protocol level gets the 3.1.1 answer (return code 1), as does a
        # CONNECT that never decoded.
        version = 4 if reason == 0x84 else self.decoder.version or 4
        props = {"reason_string": text} if version == 5 else {}
        self.transport.write(packets.connack(version, False, reason, props))
        self.clean_end = True
        self._close(text)

    def _protocol_failure(self, reason: int, text: str) -> None:
        log.info("connection %s (%s): %s; closing it", self.peer, self.identity or "-", text)
        self.gateway.protocol_errors += 1
        if self.decoder.version == 5:
            self.transport.write(packets.disconnect(reason, text))
        if not self.ready:
            self.clean_end = True
        self._close(text)

    # --- PUBLISH from the device -----------------------------------------------------------

    def _on_publish(self, publish: Publish) -> None:
        assert self.mesh is not None
        if "topic_alias" in publish.props:
            self._protocol_failure(0x94, "topic aliases are not offered (maximum 0)")
            return
        if publish.qos == 2 and publish.packet_id in self.qos2_received:
            # Forwarded once already (MQTT-4.3.3-9): only the PUBREC again.
            self.transport.write(packets.ack(self.version, packets.PUBREC, publish.packet_id))
            return
        if publish.qos and publish.packet_id in self.mesh.inflight:
            return  # a DUP of one in flight: its PUBACK/PUBREC comes when the mesh settles it
        unacknowledged = len(self.mesh.inflight) + len(self.qos2_received)
        if publish.qos and unacknowledged >= RECEIVE_MAXIMUM and self.version == 5:
            self._protocol_failure(0x93, "receive maximum exceeded")
            return
        if publish.qos == 2:
            self.qos2_forwarding.add(publish.packet_id)
        self.mesh.publish(publish.topic, convert.encode(publish), publish.qos, publish.packet_id)
        if publish.retain:
            if publish.topic in self.mesh.attached:
                self.gateway.retained.put(self.space, publish)
            else:
                self.retain_pending[publish.topic] = publish
        if self.mesh.backlog() >= PAUSE_AT and not self.paused:
            # The mesh takes less than the device sends: TCP backpressure, not a buffer.
            self.paused = True
            self.transport.pause(True)

    def on_sender_attached(self, address: str) -> None:
        """The mesh let the device send to `address`: its retained message may be kept."""
        if self.will_publisher is not None:
            self.will_publisher.on_sender_attached(address)
        publish = self.retain_pending.pop(address, None)
        if publish is not None:
            self.gateway.retained.put(self.space, publish)

    def on_credit(self) -> None:
        if self.paused and self.mesh is not None and self.mesh.backlog() <= RESUME_AT:
            self.paused = False
            self.transport.pause(False)
            self.touch()  # keep-alive was not read while paused
            self.run_held()

    def on_outcome(self, token: int, reason: int, text: str) -> None:
        if self.will_publisher is not None and token >= WILL_TOKENS:
            self.will_publisher.on_outcome(token, reason, text)
            return
        if self.closed:
            return
        if reason >= 0x80 and self.version == 4:
            # 3.1.1 has no negative PUBACK: MQTT-3.3.5-2 says close the connection.
            self._protocol_failure(reason, f"publish refused: {text}")
            return
        kind = packets.PUBACK
        if token in self.qos2_forwarding:
            self.qos2_forwarding.discard(token)
            kind = packets.PUBREC
            if reason < 0x80:  # a refusal ends the exchange: no PUBREL follows
                self.qos2_received.add(token)
        self.transport.write(packets.ack(self.version, kind, token, reason, text))

    # --- SUBSCRIBE ---------------------------------------------------------------------------

    def _on_subscribe(self, subscribe: Subscribe) -> None:
        self.subscriptions.subscribe(subscribe)

    def on_subscribed(self, topic: str, reason: int, text: str) -> None:
        self.subscriptions.on_subscribed(topic, reason, text)

    def follow_filters(self) -> None:
        self.subscriptions.follow_filters()

    def send_retained(self, topic: str, granted: int) -> None:
        retained = self.gateway.retained.get(self.space, topic)
        if retained is None:
            return
        retained.qos = min(retained.qos, granted)
        if retained.qos:
            retained.packet_id = self._packet_id()
            self.to_device[retained.packet_id] = (None, retained)  # nothing to settle
        if self.version != 5:
            retained.props = {}
        self.transport.write(packets.publish(self.version, retained))

    def _on_unsubscribe(self, unsubscribe: Unsubscribe) -> None:
        codes = self.subscriptions.unsubscribe(unsubscribe)
        self.transport.write(packets.unsuback(self.version, unsubscribe.packet_id, codes))

    # --- messages to the device ------------------------------------------------------------

    def on_message(self, topic: str, delivery: Delivery | None, message: bytes) -> None:
        """A message (its encoded bytes) for the device (`delivery` None: one a parked
        session already took from a multicast address, see persistence.hold)."""
        assert self.mesh is not None
        if self.closed:  # discarded while its mesh connection lingers: not for anyone here
            if delivery is not None:
                self.mesh.settle(delivery, Delivery.RELEASED)
            return
        qos = self.subscriptions.qos_for(topic)  # one pass over the filters per message
        if qos is None:
            # In flight when the device unsubscribed: not for it any more (MQTT-3.10.4-2).
            if delivery is not None:
                self.mesh.settle(delivery)
            return
        if self.parked:  # held until the device is back (persistence.py)
            persistence.hold(self, topic, delivery, message)
            return
        try:
            outgoing = convert.decode(topic, message, qos, 0, self.version)
        except Exception as exc:  # any message from the mesh is input here
            # Not for any MQTT subscriber (invalid UTF-8 in a decoded section, say):
            # rejected, so a queue dead-letters it rather than offering it again.
            log.warning(
                "message to %r for %s rejected: undecodable (%s)", topic, self.identity, exc
            )
            if delivery is not None:
                self.mesh.settle(delivery, Delivery.REJECTED)
            return
        if qos:
            outgoing.packet_id = packet_id = self._packet_id()
        self.transport.write(packets.publish(self.version, outgoing))
        if qos:
            self.to_device[packet_id] = (delivery, outgoing)
        elif delivery is None:
            pass  # taken from the mesh already
        elif self.transport.backlog() < WRITE_BACKLOG:
            self.mesh.settle(delivery)
        else:
            self.deferred.append(delivery)  # credit comes back when the device reads

    def drained(self) -> None:
        """The transport's backlog is small again: settle what waited on it."""
        deferred, self.deferred = self.deferred, []
        if self.mesh is not None and not self.mesh.ended:
            for delivery in deferred:
                self.mesh.settle(delivery)

    def _packet_id(self) -> int:
        for _ in range(65535):
            candidate = self.next_packet_id
            self.next_packet_id = candidate % 65535 + 1
            if candidate not in self.to_device and candidate not in self.qos2_released:
                return candidate
        raise MalformedPacket(packets.QUOTA_EXCEEDED, "no free packet identifier")

    def _on_ack(self, ack: PubAck) -> None:
        if ack.kind == packets.PUBREL:  # the device's QoS 2 publish: it lets go of the id
            known = ack.packet_id in self.qos2_received
            self.qos2_received.discard(ack.packet_id)
            reason = packets.SUCCESS if known else packets.PACKET_ID_NOT_FOUND
            self.transport.write(packets.ack(self.version, packets.PUBCOMP, ack.packet_id, reason))
            return
        if ack.kind == packets.PUBCOMP:  # the end of our QoS 2 publish: the id is free
            self.qos2_released.discard(ack.packet_id)
            return
        delivery = self.to_device.pop(ack.packet_id, (None, None))[0]
        if delivery is not None and self.mesh is not None and not self.mesh.ended:
            # PUBACK, or PUBREC: from then on the message is the device's (MQTT 4.3.3).
            self.mesh.settle(delivery)
        if ack.kind == packets.PUBREC and (ack.reason < 0x80 or self.version == 4):
            self.qos2_released.add(ack.packet_id)
            self.transport.write(packets.ack(self.version, packets.PUBREL, ack.packet_id))

    # --- ending ------------------------------------------------------------------------------

    def taken_over(self) -> None:
        """Another connection with this client id arrived (MQTT-3.1.4-3) asking for a
        clean session; no will, and this session ends."""
        self.replaced = True
        if self.parked:
            persistence.discard(self)
            return
        if self.version == 5:
            self.transport.write(packets.disconnect(0x8E, "session taken over"))
        self.clean_end = True
        self._close("session taken over")

    def transport_lost(self) -> None:
        if self.parked:
            return
        if self.held and self.ready and not self.closed:
            # The device sent more than the mesh has taken yet, then hung up: handle what
            # it sent first (for at most LINGER_SECONDS), then end as a lost connection.
            self.eof = True
            self.linger = self.gateway.loop.call_later(
                LINGER_SECONDS, lambda: self._close("connection lost")
            )
            return
        self._close("connection lost")

    def _close(self, why: str) -> None:
        if self.closed or self.parked:
            return
        if persistence.may_park(self):
            persistence.park(self, why)
            return
        self.closed = True
        self.gateway.sessions_open -= 1
        for timer in (self.keep_alive, self.connect_timer):
            if timer is not None:
                timer.cancel()
        log.debug("session %s (%s) ends: %s", self.peer, self.identity or "-", why)
        will = self.connect.will if self.connect is not None and self.ready else None
        if will is not None and not self.clean_end and self.mesh is not None:
            self.gateway.wills.publish_on_loss(self)
        else:
            if will is not None and not self.keep_will:
                self.gateway.wills.forget(self)
            if self.mesh is not None:
                self.mesh.close()
        self.gateway.forget(self)
        self.transport.close()
