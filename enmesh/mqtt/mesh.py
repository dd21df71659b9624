"""One MQTT client on the router mesh: its AMQP session, senders and receivers.

The gateway is an ordinary AMQP client of the mesh: SASL with the device's user and
password, `open.hostname` = its address space, so the router's policy (not the gateway)
decides what the device may do. Each device is an AMQP session on a connection its user's
devices share (enmesh.mqtt.connections), driven by the router's own epoll loop machinery
(`enmesh.router.engine`).
"""

from __future__ import annotations

import itertools
import logging
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

from proton import Condition, Delivery, Endpoint, Link, Receiver, Sender, Session, symbol

from enmesh.mqtt import packets
from enmesh.router import rawproton, security
from enmesh.router.engine import Timer

if TYPE_CHECKING:
    from enmesh.mqtt.connections import MeshConnection, MeshConnections

log = logging.getLogger("enmesh.mqtt.mesh")

UNAUTHORIZED = "amqp:unauthorized-access"
# How the router refuses a connection -> the CONNACK reason code.
REFUSALS = {
    UNAUTHORIZED: packets.NOT_AUTHORIZED,
    "amqp:resource-limit-exceeded": packets.QUOTA_EXCEEDED,  # the space's connection limit
}
ESTABLISHMENT_FAILED = symbol("amqp:connection-establishment-failed")
CREDIT_WINDOW = 64  # deliveries in flight per subscription: flow control, not a buffer
QOS0_BACKLOG = 1000  # QoS 0 messages held per address while the mesh gives no credit
LINGER_SECONDS = 5.0  # how long a closing device's unsent messages may wait for credit
PAUSE_AT, RESUME_AT = 500, 100  # messages waiting for credit: stop / restart reading the device
_serials = itertools.count(1)


@dataclass(frozen=True)
class RouterEndpoint:
    """Where the gateway reaches the mesh: `amqp://host:port` or `amqps://...` + CA."""

    url: str
    ca: str | None = None
    # Client side: Cyrus needs no configuration file, only its mechanism plugins.
    sasl: security.SaslSettings = field(
        default_factory=lambda: security.SaslSettings(None, "enmesh-mqtt")
    )

    @property
    def host(self) -> str:
        return urlsplit(self.url).hostname or "127.0.0.1"

    @property
    def port(self) -> int:
        parts = urlsplit(self.url)
        return parts.port or (5671 if parts.scheme == "amqps" else 5672)

    @property
    def tls(self) -> bool:
        return urlsplit(self.url).scheme == "amqps"


class MeshOwner(Protocol):
    """The MQTT side of one device, told what the mesh did."""

    def on_mesh_open(self) -> None: ...
    def on_mesh_refused(self, reason: int, text: str) -> None: ...
    def on_mesh_lost(self, text: str) -> None: ...
    def on_outcome(self, token: int, reason: int, text: str) -> None: ...
    def on_subscribed(self, topic: str, reason: int, text: str) -> None: ...
    def on_message(self, topic: str, delivery: Delivery, message: bytes) -> None: ...
    def on_credit(self) -> None: ...
    def on_sender_attached(self, address: str) -> None: ...


@dataclass
class _Outgoing:
    token: int  # the MQTT packet id for QoS 1, 0 for QoS 0
    body: bytes
    settled: bool


class MeshClient:
    """One device on the mesh: an AMQP session on its user's connection
    (enmesh.mqtt.connections), senders per topic (attached on first publish), receivers
    per subscription."""

    def __init__(self, connections: MeshConnections, owner: MeshOwner, *, name: str) -> None:
        self.connections, self.owner, self.name = connections, owner, name
        self.loop = connections.loop
        self.conn: MeshConnection | None = None
        self.session: Session | None = None
        # Link names: unique on a shared connection, where a device's new session can
        # attach while its previous one (same client id) is still ending.
        self.prefix = f"{name}#{next(_serials)}"
        # What proton's records of its session and links hold (events find their device
        # by it): a weak reference, since the device holds their wrappers, and a cycle
        # through proton's C side is one Python's collector cannot see.
        self.ref = weakref.ref(self)
        self.senders: dict[str, Sender] = {}
        self.pending: dict[str, deque[_Outgoing]] = {}
        self.receivers: dict[str, Receiver] = {}
        self.attached: set[str] = set()  # addresses whose sender the mesh accepted
        self.inflight: dict[int, tuple[str, Delivery]] = {}  # QoS 1 token -> where, what
        self.opened = False
        self.ended = False
        self._linger: Timer | None = None

    def open(self, user: str, password: str, space: str) -> None:
        """Log in as `user` to `space`; the owner hears `on_mesh_open` or a refusal."""
        self.connections.login(self, user, password, space)

    def joined(self, conn: MeshConnection, session: Session) -> None:
        """The login succeeded: this device's session on its user's connection is open."""
        self.conn, self.session, self.opened = conn, session, True
        self.owner.on_mesh_open()

    def refused(self, reason: int, text: str) -> None:
        self._end(lambda: self.owner.on_mesh_refused(reason, text))

    def lost(self, text: str) -> None:
        self._end(lambda: self.owner.on_mesh_lost(text))

    def close(self) -> None:
        """A clean close: the mesh sees the device's session end (its links with it).
        Messages still waiting for credit go first (for at most LINGER_SECONDS): a device
        that published and left at once must not lose what it sent."""
        if self.ended:
            return
        self.ended = True  # a login still on its way: its connection sees this
        if self.conn is None:
            return
        if self.backlog() and self._linger is None:
            self._linger = self.loop.call_later(LINGER_SECONDS, self._close_now)
            return
        self._close_now()

    def _close_now(self) -> None:
        if self._linger is not None:
            self._linger.cancel()
        if self.conn is not None and not self.conn.ended:
            self.conn.leave(self)

    # --- publishing ----------------------------------------------------------------------

    def publish(self, address: str, message: bytes, qos: int, token: int) -> None:
        """Send an encoded message to `address` (QoS 0 presettled); `token` names it in
        the owner's on_outcome."""
        sender = self.senders.get(address)
        if sender is None:
            assert self.session is not None
            sender = self.session.sender(f"{self.prefix}/pub/{address}")
            sender.target.address = address
            sender.mqtt_address = address
            sender.mqtt_client = self.ref
            sender.snd_settle_mode = Link.SND_MIXED
            sender.open()
            self.senders[address] = sender
        queue = self.pending.setdefault(address, deque())
        if qos == 0 and len(queue) >= QOS0_BACKLOG:
            queue.popleft()  # QoS 0 may be lost: keep the newest while nothing takes them
        queue.append(_Outgoing(token, message, qos == 0))
        self._pump(sender)
        self._process()

    def _pump(self, sender: Sender) -> None:
        # Per message: proton's C calls on the link, the address kept on its wrapper (a
        # Terminus wrapper and a string per message otherwise; rawproton).
        address: str = sender.mqtt_address
        queue, link = self.pending.get(address), sender._impl
        while queue and rawproton.link_credit(link) > 0:
            item = queue.popleft()
            # The tag is the token: an outcome finds its publish by it (updated).
            delivery = rawproton.new_delivery(sender, b"%d" % (item.token or id(item)))
            rawproton.send(link, item.body)
            rawproton.link_advance(link)
            if item.settled:
                delivery.settle()
            else:
                self.inflight[item.token] = (address, delivery)

    # --- subscribing ---------------------------------------------------------------------

    def subscribe(self, address: str) -> None:
        existing = self.receivers.get(address)
        if existing is not None:
            # Only an attach the router has answered is a grant; one still attaching is
            # answered, for every subscription waiting on it, when the router answers.
            if existing.state & Endpoint.REMOTE_ACTIVE:
                self.owner.on_subscribed(address, packets.SUCCESS, "")
            return
        assert self.session is not None
        receiver = self.session.receiver(f"{self.prefix}/sub/{address}")
        receiver.source.address = address
        receiver.mqtt_address = address
        receiver.mqtt_client = self.ref
        receiver.open()
        receiver.flow(CREDIT_WINDOW)
        self.receivers[address] = receiver
        self._process()

    def unsubscribe(self, address: str) -> bool:
        receiver = self.receivers.pop(address, None)
        if receiver is None:
            return False
        receiver.close()
        self._process()
        return True

    def settle(self, delivery: Delivery, outcome: int = Delivery.ACCEPTED) -> None:
        """The device has the message (QoS 0: written; QoS 1: PUBACK): accept, top up.
        (`Delivery.RELEASED`: the device will not have it; the mesh offers it again.)"""
        rawproton.update(delivery, outcome)
        delivery.settle()
        rawproton.top_up(delivery, CREDIT_WINDOW)
        self._process()

    # --- what the mesh did, from the connection (enmesh.mqtt.connections) -----------------

    def on_link_open(self, link: Link) -> None:
        # Told even while the device is leaving: a retained publish sent just before a
        # DISCONNECT is stored when its sender attaches (Session.on_sender_attached).
        if link.is_receiver and link.remote_source.address:
            self.owner.on_subscribed(link.source.address or "", packets.SUCCESS, "")
        elif link.is_sender and link.remote_target.address:
            self.attached.add(link.target.address or "")
            self.owner.on_sender_attached(link.target.address or "")
        # refused: a null terminus, then the detach with its condition

    def on_link_close(self, link: Link) -> None:
        if self.ended and self.conn is None:
            return
        condition = link.remote_condition
        reason = (
            packets.NOT_AUTHORIZED
            if condition is not None and condition.name == UNAUTHORIZED
            else packets.UNSPECIFIED
        )
        text = describe(condition, "the mesh detached the link")
        if link.is_receiver:
            address = link.source.address or ""
            if _same(self.receivers.get(address), link):
                del self.receivers[address]
                self.owner.on_subscribed(address, reason, text)
        else:
            address = link.target.address or ""
            if _same(self.senders.get(address), link):
                del self.senders[address]
                self.attached.discard(address)
            for item in self.pending.pop(address, deque()):
                if item.token:
                    self.owner.on_outcome(item.token, reason, text)
            for token, (where, delivery) in list(self.inflight.items()):
                if where == address:
                    del self.inflight[token]
                    delivery.settle()
                    self.owner.on_outcome(token, reason, text)

    def on_flow(self, attrs: dict[str, Any]) -> None:
        """The mesh's credit on a publish link (its attribute record): what waits goes."""
        address = attrs.get("mqtt_address")
        sender = self.senders.get(address) if address is not None else None
        if sender is not None:  # a detached one's queue went with it
            self._pump(sender)
        if self._linger is not None and not self.backlog():
            self._close_now()
        self.owner.on_credit()

    def backlog(self) -> int:
        """Messages from the device still waiting for the mesh's credit."""
        return sum(len(queue) for queue in self.pending.values())

    def received(self, link: Any, raw: Any, attrs: dict[str, Any]) -> None:
        """A message from a subscription (proton's pointers), for the owner: its bytes."""
        if rawproton.delivery_partial(raw) or not rawproton.delivery_readable(raw):
            return  # more to come, or an update of one already read
        body = rawproton.receive(link, rawproton.delivery_pending(raw))
        rawproton.link_advance(link)
        self.owner.on_message(attrs.get("mqtt_address", ""), rawproton.LeanDelivery(raw), body)

    def updated(self, raw: Any) -> None:
        """The mesh's outcome of a publish: the owner hears it once it is terminal."""
        state = rawproton.delivery_remote_state(raw)
        if not rawproton.delivery_updated(raw) and not state:
            return
        token = int(rawproton.delivery_tag(raw))
        entry = self.inflight.get(token)
        if entry is not None and entry[1]._impl == raw and state in _TERMINAL:
            del self.inflight[token]
            self.owner.on_outcome(token, *_outcome(entry[1]))
        if state or rawproton.delivery_settled(raw):
            rawproton.delivery_settle(raw)

    def _end(self, tell: Callable[[], None]) -> None:
        if self.ended:
            return
        self.ended = True
        tell()

    def _process(self) -> None:
        """Write at the end of this loop round (MeshConnection.process_soon)."""
        if self.conn is not None:
            self.conn.process_soon()


_TERMINAL = (Delivery.ACCEPTED, Delivery.REJECTED, Delivery.RELEASED, Delivery.MODIFIED)


def _outcome(delivery: Delivery) -> tuple[int, str]:
    state = delivery.remote_state
    if state == Delivery.ACCEPTED:
        return packets.SUCCESS, ""
    condition = delivery.remote.condition if state == Delivery.REJECTED else None
    if condition is not None and condition.name == UNAUTHORIZED:
        return packets.NOT_AUTHORIZED, describe(condition, "")
    if state == Delivery.REJECTED:
        return packets.UNSPECIFIED, describe(condition, "rejected by the mesh")
    # Released: no consumer took it (multicast with no receiver anywhere settles so): for
    # MQTT a success, 0x10 "no matching subscribers" (3.1.1 just acknowledges it).
    return packets.NO_SUBSCRIBERS, "no consumer took the message"


def describe(condition: Condition | None, default: str) -> str:
    if condition is None:
        return default
    return f"{condition.name}: {condition.description}" if condition.description else condition.name


def _same(known: Link | None, link: Link) -> bool:
    """proton hands out a new wrapper per event: compare links by their unique name."""
    return known is not None and known.name == link.name
