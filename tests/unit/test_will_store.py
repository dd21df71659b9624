"""The router's will store: a file written before the `internal` column existed is read."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from enmesh.router.will_store import StoredWill, WillStore
from enmesh.router.wills import _legacy_internal


def test_a_store_without_the_internal_column_is_upgraded_in_place(tmp_path: Path) -> None:
    path = tmp_path / "wills.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE wills (id INTEGER PRIMARY KEY AUTOINCREMENT, hostname TEXT NOT NULL,"
            " user TEXT NOT NULL, address TEXT NOT NULL, message BLOB NOT NULL)"
        )
        db.execute(
            "INSERT INTO wills (hostname, user, address, message) VALUES (?, ?, ?, ?)",
            ("iot", "device@iot", "telemetry", b"old"),
        )
    store = WillStore(path)
    (old,) = store.all()
    assert (old.user, old.address, old.internal, old.message) == (
        "device@iot",
        "telemetry",
        "",
        b"old",
    )
    assert _legacy_internal(old.hostname, old.address) == "iot/telemetry"
    assert _legacy_internal("$default", "x") == "x"
    row = store.put(None, StoredWill(0, "iot", "u@iot", "a", "iot/a", b"new"))
    assert [w.internal for w in store.all()] == ["", "iot/a"]
    store.delete(row)
    assert len(store.all()) == 1
