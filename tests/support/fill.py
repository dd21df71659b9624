"""Store many messages through a mesh quickly: one proton sender, as fast as credit
allows, done once the broker accepted every one (a rejection fails at once)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from proton import Message
from proton.handlers import MessagingHandler
from proton.reactor import Container


class Fill(MessagingHandler):  # type: ignore[misc]
    def __init__(self, options: dict[str, Any], address: str, bodies: Sequence[str]) -> None:
        super().__init__()
        self.options, self.address, self.bodies = options, address, bodies
        self.sent = self.accepted = 0

    def on_start(self, event: Any) -> None:
        connection = event.container.connect(**self.options)
        event.container.create_sender(connection, self.address)

    def on_sendable(self, event: Any) -> None:
        while event.sender.credit and self.sent < len(self.bodies):
            event.sender.send(Message(body=self.bodies[self.sent], durable=True))
            self.sent += 1

    def on_accepted(self, event: Any) -> None:
        self.accepted += 1
        if self.accepted == len(self.bodies):
            event.connection.close()

    def on_rejected(self, event: Any) -> None:
        raise RuntimeError(f"message rejected: {event.delivery.remote.condition}")


def fill(options: dict[str, Any], address: str, bodies: Sequence[str]) -> None:
    Container(Fill(options, address, bodies)).run()
