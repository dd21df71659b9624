"""Sessions the way the MQTT gateway opens them for its devices on a user's shared
connection: each a receiver from the multicast `broadcast` and a sender to the anycast
`telemetry` of the sample model (tests/router/test_session_end.py,
benchmarks/router_sessions.py)."""

from __future__ import annotations

from proton import Receiver, Sender, Session
from proton.utils import BlockingConnection


def open_device_session(connection: BlockingConnection, name: str) -> tuple[Receiver, Sender]:
    """A new session with its two links opened (not yet attached by the router)."""
    session: Session = connection.conn.session()
    session.open()
    receiver = session.receiver(f"{name}/sub")
    receiver.source.address = "broadcast"
    receiver.open()
    receiver.flow(10)
    sender = session.sender(f"{name}/pub")
    sender.target.address = "telemetry"
    sender.open()
    return receiver, sender
