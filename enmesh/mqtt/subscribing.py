"""A device's subscriptions: SUBSCRIBE and UNSUBSCRIBE, the mesh's answers, SUBACK.

An exact topic is one address: one receiver on the mesh, granted when the router answers
its attach (a refusal is the SUBACK's reason code). A wildcard filter (enmesh.mqtt.topics)
is the set of the space's publish-subscribe addresses it matches now and later: one
receiver per address, shared with any other subscription covering it; its SUBACK waits
for those attaches, and an address the device may not read is left out (the filter is
still granted, as MQTT grants a filter, not topics). A message's QoS is the highest any
covering subscription granted.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from enmesh.mqtt import packets
from enmesh.mqtt.packets import Subscribe, Unsubscribe
from enmesh.mqtt.topics import is_wildcard, matches

if TYPE_CHECKING:
    from enmesh.mqtt.mesh import MeshClient
    from enmesh.mqtt.session import Session

log = logging.getLogger("enmesh.mqtt.session")
NO_SUBSCRIPTION_EXISTED = 0x11


@dataclass
class _SubAck:
    packet_id: int
    topics: list[str]
    codes: list[int]
    members: dict[int, set[str]] = field(default_factory=dict)  # index -> unanswered addresses

    @property
    def waiting(self) -> bool:
        return any(self.members.values())


class Subscriptions:
    def __init__(self, session: Session) -> None:
        self.session = session
        self.exact: dict[str, int] = {}  # address -> granted QoS
        self.filters: dict[str, int] = {}  # wildcard filter -> granted QoS
        self.refused: set[str] = set()  # addresses a filter matched that the device may not read
        self.subacks: list[_SubAck] = []

    @property
    def _mesh(self) -> MeshClient:
        assert self.session.mesh is not None
        return self.session.mesh

    def qos_for(self, address: str) -> int | None:
        """The QoS a message on `address` goes out with: the highest grant covering it,
        0 while a SUBSCRIBE for it still waits; None if nothing wants it any more."""
        granted = [q for f, q in self.filters.items() if matches(f, address)]
        if address in self.exact:
            granted.append(self.exact[address])
        if granted:
            return max(granted)
        return 0 if self._pending(address) else None

    def _pending(self, address: str) -> bool:
        return any(
            address in p.topics or any(address in m for m in p.members.values())
            for p in self.subacks
        )

    def subscribe(self, subscribe: Subscribe) -> None:
        addresses = self.session.gateway.addresses
        pending = _SubAck(subscribe.packet_id, [t for t, _ in subscribe.topics], [])
        for index, (topic, options) in enumerate(subscribe.topics):
            qos = options & 3  # the codec refuses 3 and malformed filters
            if topic.startswith("$share/"):
                pending.codes.append(packets.SHARED_NOT_SUPPORTED)
            elif is_wildcard(topic) and not addresses.enabled:
                pending.codes.append(packets.WILDCARDS_NOT_SUPPORTED)
            elif is_wildcard(topic):
                pending.codes.append(qos)
                self.filters[topic] = qos
                found = addresses.matching(self.session.space, [topic]) - self.refused
                pending.members[index] = found
            else:
                pending.codes.append(qos)
                pending.members[index] = {topic}
        self.subacks.append(pending)
        for address in sorted(set().union(*pending.members.values())):
            self._mesh.subscribe(address)
        self.flush()

    def follow_filters(self) -> None:
        """Attach to addresses the filters match that are new in the address index."""
        if self.session.mesh is None or self.session.mesh.ended:
            return
        found = self.session.gateway.addresses.matching(self.session.space, self.filters)
        for address in sorted(found - self.refused - set(self._mesh.receivers)):
            self._mesh.subscribe(address)

    def on_subscribed(self, address: str, reason: int, text: str) -> None:
        answered = False
        for pending in self.subacks:
            for index, members in pending.members.items():
                if address not in members:
                    continue
                members.discard(address)
                answered = True
                topic = pending.topics[index]
                if is_wildcard(topic):
                    if reason != packets.SUCCESS:
                        self._refused(address, topic, text)
                elif reason == packets.SUCCESS:
                    self.exact[topic] = pending.codes[index]
                else:
                    pending.codes[index] = reason
                    log.info(
                        "subscription %r of %s refused: %s", topic, self.session.identity, text
                    )
        if not answered and reason != packets.SUCCESS:
            self.exact.pop(address, None)
            if any(matches(f, address) for f in self.filters):
                self._refused(address, "a wildcard", text)
            else:
                log.info("subscription %r of %s ended: %s", address, self.session.identity, text)
        self.flush()

    def _refused(self, address: str, topic: str, text: str) -> None:
        self.refused.add(address)
        log.info(
            "%r, matched by %r of %s, left out: %s", address, topic, self.session.identity, text
        )

    def flush(self) -> None:
        """Send the SUBACKs whose attaches are all answered, in order, with the retained."""
        while self.subacks and not self.subacks[0].waiting and not self.session.closed:
            done = self.subacks.pop(0)
            session = self.session
            session.transport.write(packets.suback(session.version, done.packet_id, done.codes))
            for topic, code in zip(done.topics, done.codes, strict=True):
                if code < 0x80:
                    for address in self._retained_topics(topic):
                        session.send_retained(address, code)

    def _retained_topics(self, topic: str) -> list[str]:
        if not is_wildcard(topic):
            return [topic]
        space = self.session.space
        covered = self.session.gateway.addresses.matching(space, [topic]) - self.refused
        return [t for t in self.session.gateway.retained.topics(space) if t in covered]

    def unsubscribe(self, unsubscribe: Unsubscribe) -> list[int]:
        """Drop the subscriptions; the reason code for each topic."""
        codes = []
        for topic in unsubscribe.topics:
            known = (self.filters if is_wildcard(topic) else self.exact).pop(topic, None)
            codes.append(packets.SUCCESS if known is not None else NO_SUBSCRIPTION_EXISTED)
        for address in list(self._mesh.receivers):
            if not self.covers(address):
                self._mesh.unsubscribe(address)
        return codes

    def covers(self, address: str) -> bool:
        """Still wanted: an exact subscription, a filter, or a SUBSCRIBE waiting for it."""
        return self.qos_for(address) is not None
