"""Persistent sessions: MQTT 3.1.1 `clean session = 0`, MQTT 5 `Session Expiry Interval`.

When such a device goes away, its session is *parked*, not ended: the device's own AMQP
connection stays open with its subscriptions' receivers attached, and what arrives for
it is held **unsettled** on the mesh. Nothing is accepted for a device that is not
there, so the contract of each address holds while it is offline:
- a queue or `topic::subscription` message stays the broker's until the device takes it
  (a gateway restart releases it back to the broker's queue, it is not lost);
- a direct (anycast) message is settled end to end only when the device acknowledges it,
  so its producer's PUBACK or AMQP outcome waits for the device;
- credit bounds it: each subscription holds at most `CREDIT_WINDOW` (64) messages;
  past that the mesh gives its producers no credit for this device (other consumers of an
  anycast address take the traffic; stored addresses keep it on the broker);
- multicast is the exception (`hold`): the router paces a multicast producer to its
  slowest subscriber, so copies are taken and the newest MULTICAST_HELD kept here.

A CONNECT with `clean session = 0` (5.0: `clean start = 0`) for a parked or connected
session resumes it, once the router has accepted the device's credentials on a new AMQP
connection (so a changed password or a removed user is refused as for any login; that
connection is then closed and the session's own carries on): CONNACK says `session
present`, unacknowledged QoS 1/2 messages are sent again with DUP, PUBRELs again, then
what was held while offline, in order. A session expires after its interval (5.0) or
`--max-session-expiry` (3.1.1, and 5.0's "never"): its receivers detach and what they
held goes back to the mesh (released).

Parked sessions live in the gateway process: a gateway restart ends them (their AMQP
connections close; what they held goes back to the mesh, so stored ones stay on the brokers) and
the device's next CONNECT gets `session present = 0`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from proton import Delivery

from enmesh.mqtt import packets
from enmesh.mqtt.packets import Connect

if TYPE_CHECKING:
    from enmesh.mqtt.session import Session

log = logging.getLogger("enmesh.mqtt.session")
NEVER = 0xFFFFFFFF  # MQTT 5: the session does not expire
MULTICAST_HELD = 1000  # multicast messages kept per parked session (the newest)


def persists(connect: Connect) -> bool:
    """Does the session outlive its connection?"""
    if connect.version == 5:
        return int(connect.props.get("session_expiry", 0)) > 0
    return not connect.clean


def resumes(connect: Connect) -> bool:
    """Does this CONNECT ask for the existing session (not a clean one)?"""
    return not connect.clean


def expiry_seconds(connect: Connect, maximum: float) -> float:
    """How long a parked session lives: its interval (5.0), at most `maximum`."""
    if connect.version == 5:
        interval = int(connect.props.get("session_expiry", 0))
        return maximum if interval == NEVER else min(float(interval), maximum)
    return maximum


class Offline:
    """A parked session's transport: nothing to write to, nothing waiting."""

    def write(self, data: bytes) -> None:
        pass

    def close(self) -> None:
        pass

    def backlog(self) -> int:
        return 0

    def pause(self, paused: bool) -> None:
        pass

    def hand_to(self, session: Session) -> None:
        pass


OFFLINE = Offline()


def may_park(session: Session) -> bool:
    """Does this session outlive the connection that is ending?"""
    return (
        session.ready
        and session.connect is not None
        and persists(session.connect)
        and not session.replaced
        and session.mesh is not None
        and not session.mesh.ended
    )


def park(session: Session, why: str) -> None:
    """The connection ended; the session, its subscriptions and the device's AMQP
    connection stay, holding what arrives until the device is back or it expires."""
    assert session.connect is not None
    log.info("session of %s (%s) parked: %s", session.identity, session.connect.client_id, why)
    session.parked = True
    session.gateway.sessions_open -= 1
    _stop_timers(session)
    session.held.clear()
    session.paused = session.eof = False
    session.drained()  # QoS 0 already written: the device had its chance
    transport, session.transport = session.transport, OFFLINE
    transport.close()
    if session.connect.will is not None and not session.clean_end:
        session.gateway.wills.publish_on_loss(session)  # over this session's own connection
    elif session.connect.will is not None and not session.keep_will:
        session.gateway.wills.forget(session)
    seconds = expiry_seconds(session.connect, session.gateway.settings.max_session_expiry)
    session.expiry = session.gateway.loop.call_later(seconds, lambda: _expire(session))


def _expire(session: Session) -> None:
    log.info("session of %s expired", session.identity)
    discard(session)


def discard(session: Session) -> None:
    """The session ends: what it held goes back to the mesh (released), its receivers
    detach, and a will still waiting for its delay goes out now (MQTT 5 3.1.2.5: at the
    end of the session at the latest)."""
    if session.expiry is not None:
        session.expiry.cancel()
    session.parked, session.closed = False, True
    mesh = session.mesh
    if mesh is not None and not mesh.ended:
        held = [d for _, d, _ in session.offline] + [d for d, _ in session.to_device.values()]
        for delivery in held:
            if delivery is not None:
                mesh.settle(delivery, Delivery.RELEASED)
    session.offline.clear()
    session.to_device.clear()
    session.gateway.forget(session)
    if session.gateway.wills.end_of_session(session):
        return  # the will's publisher closes the mesh connection once the will is out
    if mesh is not None:
        mesh.close()


def hold(session: Session, topic: str, delivery: Delivery | None, message: bytes) -> None:
    """A message for a parked session. Held unsettled, so the mesh's contract holds while
    the device is away, except on a multicast address: there an unsettled copy would hold
    back every subscriber of the address (the router gives its producers credit for the
    slowest one), so the copy is taken and kept here, the newest MULTICAST_HELD."""
    space = session.space
    if delivery is not None and session.gateway.addresses.kind(space, topic) == "multicast":
        assert session.mesh is not None
        session.mesh.settle(delivery)
        delivery = None
        kept = [entry for entry in session.offline if entry[1] is None]
        if len(kept) >= MULTICAST_HELD:
            session.offline.remove(kept[0])
    session.offline.append((topic, delivery, message))


def resume(session: Session, newer: Session) -> None:
    """`newer` asked for this session (clean start 0) and the mesh accepted its login:
    this session carries on over `newer`'s connection (MQTT 4.4)."""
    if not session.parked:  # still connected (MQTT-3.1.4-3): that connection ends
        session.clean_end = True
        if session.version == 5:
            session.transport.write(packets.disconnect(0x8E, "session taken over"))
        park(session, "session taken over")
    if session.expiry is not None:
        session.expiry.cancel()
    transport = newer.transport
    _retire(newer)
    session.parked = False
    session.gateway.sessions_open += 1
    if session.linger is not None:
        session.linger.cancel()
    transport.hand_to(session)
    session.transport, session.decoder, session.peer = transport, newer.decoder, newer.peer
    session.connect, session.held = newer.connect, newer.held
    session.clean_end = session.keep_will = session.assigned_id = False
    if session.connect is not None and session.connect.will is not None:
        session.gateway.wills.remember(session)
    session.transport.write(
        packets.connack(session.version, True, packets.SUCCESS, session.props())
    )
    session.touch()
    log.info("session of %s resumed", session.identity)
    for _, publish in session.to_device.values():  # MQTT-4.4.0-1: again, with DUP
        publish.dup = True
        session.transport.write(packets.publish(session.version, publish))
    for packet_id in sorted(session.qos2_released):
        session.transport.write(packets.ack(session.version, packets.PUBREL, packet_id))
    offline, session.offline = session.offline, []
    for topic, delivery, message in offline:
        session.on_message(topic, delivery, message)
    session.run_held()


def _retire(session: Session) -> None:
    """A connection whose CONNECT resumed another session: it has no session of its
    own, and its mesh connection served only to check the login."""
    session.closed = True
    session.gateway.sessions_open -= 1
    _stop_timers(session)
    if session.mesh is not None:
        session.mesh.close()


def _stop_timers(session: Session) -> None:
    """The connection's timers: keep-alive, CONNECT wait, a lost connection's linger."""
    for timer in (session.keep_alive, session.connect_timer, session.linger):
        if timer is not None:
            timer.cancel()
