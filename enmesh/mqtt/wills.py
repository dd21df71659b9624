"""The will service: MQTT wills kept durably, published when a device goes silent.

A will is written to a SQLite file in the gateway's state directory when its CONNECT is
accepted and deleted on a clean DISCONNECT or once the mesh accepted the published will.
While the gateway runs, a lost device's will goes out over that device's own AMQP
connection (its identity, its rights). A will still in the file when the gateway starts
belongs to a device whose connection ended with the previous gateway process; it is
published with the address space's will account (`--will-account`), and stays stored
(with a warning) for a space that has none.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from dataclasses import dataclass
from typing import TYPE_CHECKING

from proton import Delivery

from enmesh.mqtt import convert, packets
from enmesh.mqtt.mesh import MeshClient
from enmesh.mqtt.packets import Publish, Will
from enmesh.mqtt.persistence import expiry_seconds
from enmesh.router.engine import Timer

if TYPE_CHECKING:
    from enmesh.mqtt.gateway import Gateway
    from enmesh.mqtt.session import Session

log = logging.getLogger("enmesh.mqtt.wills")

Key = tuple[str, str]  # (address space, client id)
WILL_SETTLE_TIMEOUT = 30.0  # a will the mesh does not take by then is given up, logged
WILL_TOKENS = 1 << 16  # the first will token: past every MQTT packet id

SCHEMA = """
CREATE TABLE IF NOT EXISTS wills (
    space TEXT NOT NULL, client_id TEXT NOT NULL, identity TEXT NOT NULL,
    topic TEXT NOT NULL, payload BLOB NOT NULL, qos INTEGER NOT NULL,
    retain INTEGER NOT NULL, props TEXT NOT NULL,
    PRIMARY KEY (space, client_id)
)
"""


@dataclass
class StoredWill:
    key: Key
    identity: str
    will: Will


def _props_json(will: Will) -> str:
    """Will properties as JSON (binary correlation data as hex)."""
    props = {k: v for k, v in will.props.items() if k != "will_delay"}
    if "correlation_data" in props:
        props["correlation_data"] = props["correlation_data"].hex()
    return json.dumps(props)


def _props_from_json(text: str) -> dict[str, object]:
    props: dict[str, object] = json.loads(text)
    if "correlation_data" in props:
        props["correlation_data"] = bytes.fromhex(str(props["correlation_data"]))
    if "user_property" in props:
        props["user_property"] = [tuple(pair) for pair in props["user_property"]]  # type: ignore[attr-defined]
    return props


def will_message(will: Will) -> bytes:
    """The will as the encoded AMQP message the mesh gets."""
    props = {k: v for k, v in will.props.items() if k != "will_delay"}
    return convert.encode(Publish(will.topic, will.payload, will.qos, will.retain, 0, props))


class WillService:
    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        gateway.settings.state_dir.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(str(gateway.settings.state_dir / "wills.sqlite3"))
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute(SCHEMA)
        self.db.commit()
        self.delayed: dict[Key, tuple[Timer, Session]] = {}
        self.published = 0

    # --- the store ---------------------------------------------------------------------

    def remember(self, session: Session) -> None:
        key = _key(session)
        will = session.connect.will if session.connect else None
        assert will is not None
        self.db.execute(
            "INSERT OR REPLACE INTO wills VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                *key,
                session.identity,
                will.topic,
                will.payload,
                will.qos,
                int(will.retain),
                _props_json(will),
            ),
        )
        self.db.commit()

    def forget(self, session: Session) -> None:
        self._delete(_key(session))

    def _delete(self, key: Key) -> None:
        self.db.execute("DELETE FROM wills WHERE space = ? AND client_id = ?", key)
        self.db.commit()

    def stored(self) -> list[StoredWill]:
        rows = self.db.execute("SELECT * FROM wills ORDER BY space, client_id").fetchall()
        return [
            StoredWill(
                (space, cid),
                identity,
                Will(topic, bytes(payload), qos, bool(retain), _props_from_json(props)),
            )
            for space, cid, identity, topic, payload, qos, retain, props in rows
        ]

    def close(self) -> None:
        self.db.close()

    # --- publishing --------------------------------------------------------------------

    def publish_on_loss(self, session: Session) -> None:
        """The device went without DISCONNECT: publish its will, after its delay (5.0:
        the smaller of the will delay and the session expiry interval)."""
        assert session.connect is not None and session.connect.will is not None
        connect = session.connect
        delay = 0
        if connect.version == 5:
            will_delay = int(connect.will.props.get("will_delay", 0))  # type: ignore[union-attr]
            ends = expiry_seconds(connect, self.gateway.settings.max_session_expiry)
            delay = int(min(will_delay, ends))  # the session's real end, capped or not
        if delay:
            key = _key(session)
            timer = self.gateway.loop.call_later(delay, lambda: self._publish_delayed(key))
            self.delayed[key] = (timer, session)
            return
        self._publish_with(session)

    def end_of_session(self, session: Session) -> bool:
        """A parked session ends (expiry, discard): its will goes out now if it was still
        waiting for its delay, or keeps going if it is on its way. True if the will's
        publisher now owns the session's mesh connection (and closes it when done)."""
        key = _key(session)
        entry = self.delayed.get(key)
        if entry is not None and entry[1] is session:
            del self.delayed[key]
            entry[0].cancel()
            self._publish_with(session)  # not parked any more: the publisher owns the mesh
            return session.mesh is not None and not session.mesh.ended
        publisher = session.will_publisher
        if publisher is not None and publisher.waiting and session.mesh is not None:
            publisher.shared = False
            session.mesh.owner = publisher
            session.will_publisher = None
            return True
        return False

    def cancel_delayed(self, key: Key) -> None:
        """The device came back within its will delay: no will (MQTT-3.1.3-9)."""
        entry = self.delayed.pop(key, None)
        if entry is not None:
            timer, session = entry
            timer.cancel()
            self._delete(key)
            if session.mesh is not None and not session.parked:  # a parked one carries on
                session.mesh.close()

    def _publish_delayed(self, key: Key) -> None:
        entry = self.delayed.pop(key, None)
        if entry is not None:
            self._publish_with(entry[1])

    def _publish_with(self, session: Session) -> None:
        mesh = session.mesh
        assert mesh is not None and session.connect is not None
        will = session.connect.will
        assert will is not None
        if mesh.ended:
            log.warning("will of %s kept: its mesh connection is gone", session.identity)
            return
        stored = [StoredWill(_key(session), session.identity, will)]
        publisher = _Publisher(self, stored, shared=session.parked)
        publisher.mesh = mesh
        if session.parked:  # the session keeps its connection and passes the outcome on
            session.will_publisher = publisher
        else:
            mesh.owner = publisher
        publisher.on_mesh_open()

    def recover(self) -> None:
        """Wills left by a previous gateway process, published with the will accounts."""
        by_space: dict[str, list[StoredWill]] = {}
        for stored in self.stored():
            by_space.setdefault(stored.key[0], []).append(stored)
        for space, wills in by_space.items():
            account = self.gateway.settings.will_accounts.get(space)
            if account is None:
                log.warning(
                    "%d will(s) of address space %r kept: no --will-account for it",
                    len(wills),
                    space,
                )
                continue
            publisher = _Publisher(self, wills)
            publisher.mesh = MeshClient(self.gateway.connections, publisher, name=f"wills/{space}")
            publisher.mesh.open(account[0], account[1], space)


class _Publisher:
    """Owns a mesh connection while it publishes wills; closes it when they are out."""

    mesh: MeshClient

    def __init__(
        self, service: WillService, wills: list[StoredWill], *, shared: bool = False
    ) -> None:
        self.service = service
        self.shared = shared  # a parked session's connection: not ours to close
        # Tokens above MQTT's packet ids: a will can share the device's own mesh connection,
        # whose in-flight publishes are keyed by their packet ids (1-65535).
        self.waiting = {WILL_TOKENS + i: w for i, w in enumerate(wills)}
        self.timer = service.gateway.loop.call_later(WILL_SETTLE_TIMEOUT, self._give_up)

    def on_mesh_open(self) -> None:
        # Unsettled on the AMQP side whatever the will's QoS: it leaves the store only
        # once the mesh has it.
        for token, stored in self.waiting.items():
            log.info("publishing the will of %s to %r", stored.identity, stored.will.topic)
            self.mesh.publish(stored.will.topic, will_message(stored.will), 1, token)

    def on_outcome(self, token: int, reason: int, text: str) -> None:
        stored = self.waiting.pop(token, None)
        if stored is None:
            return
        if reason < packets.UNSPECIFIED:  # taken (0x10: by no one; MQTT counts it published)
            self.service.published += 1
        else:
            log.warning("will of %s to %r refused: %s", stored.identity, stored.will.topic, text)
        self.service._delete(stored.key)
        if not self.waiting:
            self.timer.cancel()
            self._done()

    def _give_up(self) -> None:
        for stored in self.waiting.values():
            log.warning("will of %s to %r not taken in time", stored.identity, stored.will.topic)
            self.service._delete(stored.key)
        self.waiting.clear()
        self._done()

    def _done(self) -> None:
        if not self.shared:
            self.mesh.close()

    def on_mesh_refused(self, reason: int, text: str) -> None:
        self.timer.cancel()
        log.warning("will account refused by the mesh: %s; wills kept", text)

    def on_mesh_lost(self, text: str) -> None:
        self.timer.cancel()
        if self.waiting:
            log.warning("%d will(s) kept: mesh connection lost (%s)", len(self.waiting), text)

    def on_subscribed(self, topic: str, reason: int, text: str) -> None:
        pass

    def on_credit(self) -> None:
        pass

    def on_sender_attached(self, address: str) -> None:
        """The mesh let the will's sender attach (the user may send there): a retained
        will is kept as the topic's retained message (MQTT-3.1.2-17), delivered or not."""
        for stored in self.waiting.values():
            will = stored.will
            if will.retain and will.topic == address:
                retained = Publish(will.topic, will.payload, will.qos, True, 0, will.props)
                self.service.gateway.retained.put(stored.key[0], retained)

    def on_message(self, topic: str, delivery: Delivery, message: bytes) -> None:
        pass


def _key(session: Session) -> Key:
    assert session.connect is not None
    return (session.identity.rsplit("@", 1)[1], session.connect.client_id)
