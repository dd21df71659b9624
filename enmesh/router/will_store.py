"""Where enmesh-router keeps registered wills: a SQLite file (`--will-store`), or memory.

A will is written before the router accepts its message, and deleted when it is
cancelled or once the mesh accepted it when published, so a will whose connection ended
with the process (crash, SIGKILL, host restart, a stop) is still there at the next start.
Without a file, wills live only as long as the process.
"""

from __future__ import annotations

import logging
import sqlite3
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("enmesh.router.wills")


class WillStoreError(Exception):
    """The store could not write a will."""


SCHEMA = """
CREATE TABLE IF NOT EXISTS wills (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    hostname TEXT NOT NULL, user TEXT NOT NULL, address TEXT NOT NULL, internal TEXT NOT NULL,
    message BLOB NOT NULL
)
"""


@dataclass(frozen=True)
class StoredWill:
    row: int
    hostname: str  # the connection's vhost ("" without policy)
    user: str
    address: str  # the will's `to`, as the client named it
    internal: str  # that address inside the router (`<space>/<to>` on a multi-tenant
    # listener; "" in a row written before the column existed)
    message: bytes  # the will message, as the client sent it


class WillStore:
    """Registered wills by row id; every change committed before it is acknowledged."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch(mode=0o600, exist_ok=True)  # wills are messages: the router's alone
        self.db = sqlite3.connect(str(path) if path is not None else ":memory:")
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")  # a will is written rarely: make it last
        self.db.execute(SCHEMA)
        columns = {row[1] for row in self.db.execute("PRAGMA table_info(wills)")}
        if "internal" not in columns:  # a store written before the column existed
            self.db.execute("ALTER TABLE wills ADD COLUMN internal TEXT NOT NULL DEFAULT ''")
        self.db.commit()

    def put(self, row: int | None, will: StoredWill) -> int:
        """Store a will (replacing `row`, a will registered earlier on the same link).

        Raises WillStoreError if it cannot be written: the will is then refused."""
        try:
            with self.db:
                if row is not None:
                    self.db.execute("DELETE FROM wills WHERE id = ?", (row,))
                cursor = self.db.execute(
                    "INSERT INTO wills (hostname, user, address, internal, message)"
                    " VALUES (?, ?, ?, ?, ?)",
                    (will.hostname, will.user, will.address, will.internal, will.message),
                )
        except sqlite3.Error as exc:
            raise WillStoreError(f"{self.path or 'memory'}: {exc}") from exc
        return int(cursor.lastrowid or 0)

    def delete(self, row: int) -> None:
        """Forget a will; a failure is logged (the will may come again after a restart)."""
        try:
            with self.db:
                self.db.execute("DELETE FROM wills WHERE id = ?", (row,))
        except sqlite3.Error as exc:
            log.error("will store %s: cannot delete will %d: %s", self.path, row, exc)

    def all(self) -> list[StoredWill]:
        rows = self.db.execute(
            "SELECT id, hostname, user, address, internal, message FROM wills ORDER BY id"
        )
        return [StoredWill(r[0], r[1], r[2], r[3], r[4], bytes(r[5])) for r in rows]

    def close(self) -> None:
        self.db.close()
