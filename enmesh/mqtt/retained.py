"""Retained messages: the last retained PUBLISH per (address space, topic), kept in SQLite.

A retained PUBLISH is stored once the mesh has let the device attach a sender to that
address (the router's policy said it may send there), not when a consumer accepts it: a
retained message is for subscribers that come later. An empty retained payload deletes
it (MQTT-3.3.1-6). A new subscription the mesh accepted gets the stored message first,
with the RETAIN flag; the router's policy has then said the subscriber may receive there.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from enmesh.mqtt.packets import Publish

SCHEMA = """
CREATE TABLE IF NOT EXISTS retained (
    space TEXT NOT NULL, topic TEXT NOT NULL, payload BLOB NOT NULL, qos INTEGER NOT NULL,
    props TEXT NOT NULL, PRIMARY KEY (space, topic)
)
"""
# Properties that travel with a retained message (not topic aliases or subscription ids).
KEPT = ("payload_format", "content_type", "response_topic", "user_property")


class RetainedStore:
    def __init__(self, state_dir: Path) -> None:
        state_dir.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(str(state_dir / "retained.sqlite3"))
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute(SCHEMA)
        self.db.commit()

    def put(self, space: str, publish: Publish) -> None:
        if not publish.payload:
            self.db.execute(
                "DELETE FROM retained WHERE space = ? AND topic = ?", (space, publish.topic)
            )
        else:
            props = {k: publish.props[k] for k in KEPT if k in publish.props}
            self.db.execute(
                "INSERT OR REPLACE INTO retained VALUES (?, ?, ?, ?, ?)",
                (space, publish.topic, publish.payload, publish.qos, json.dumps(props)),
            )
        self.db.commit()

    def get(self, space: str, topic: str) -> Publish | None:
        row = self.db.execute(
            "SELECT payload, qos, props FROM retained WHERE space = ? AND topic = ?",
            (space, topic),
        ).fetchone()
        if row is None:
            return None
        payload, qos, props = row
        decoded = json.loads(props)
        if "user_property" in decoded:
            decoded["user_property"] = [tuple(pair) for pair in decoded["user_property"]]
        return Publish(topic, bytes(payload), qos, True, 0, decoded)

    def topics(self, space: str) -> list[str]:
        rows = self.db.execute(
            "SELECT topic FROM retained WHERE space = ? ORDER BY topic", (space,)
        )
        return [str(topic) for (topic,) in rows]

    def close(self) -> None:
        self.db.close()
