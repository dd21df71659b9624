"""A route-container peer in a process of its own, for tests of a router's connectors,
autoLinks and linkRoutes: `python -m tests.support.fake_peer PORT` listens on
127.0.0.1:PORT, accepts every connection and link, and prints one line per event
(`listening`, `open`, `attach <our role> <address>`, `detach <address>`, `closed`).
`--refuse N` answers the first N connections' open and closes them at once with an error,
as RabbitMQ does while the connection's vhost is down (`refused`); `--hold SECONDS`
closes each connection it accepted after that long.

A process of its own because Cyrus SASL is set up once per process: a proton server in
the test process would fix Cyrus to its defaults, and a router run inside the test
process later (tests/support/inprocess.py) could no longer read its own SASL database.
"""

from __future__ import annotations

import argparse
from typing import Any

from proton import Condition
from proton.handlers import MessagingHandler
from proton.reactor import Container


class Peer(MessagingHandler):  # type: ignore[misc]
    def __init__(self, port: int, refuse: int, hold: float | None) -> None:
        super().__init__()
        self.port = port
        self.refuse = refuse
        self.hold = hold

    def on_start(self, event: Any) -> None:
        event.container.listen(f"127.0.0.1:{self.port}")
        say("listening")

    def on_connection_opened(self, event: Any) -> None:
        connection = event.connection
        if self.refuse > 0:
            self.refuse -= 1
            connection.condition = Condition("amqp:internal-error", "vhost 'enmesh' is down")
            connection.close()
            say("refused")
            return
        say("open")
        if self.hold is not None:
            event.container.schedule(self.hold, Closer(connection))

    def on_connection_closed(self, event: Any) -> None:
        say("closed")

    def on_link_opening(self, event: Any) -> None:
        link = event.link
        address = link.remote_source.address if link.is_sender else link.remote_target.address
        link.source.address = link.remote_source.address
        link.target.address = link.remote_target.address
        link.open()
        say(f"attach {'sender' if link.is_sender else 'receiver'} {address}")

    def on_link_closing(self, event: Any) -> None:
        say(f"detach {event.link.remote_source.address}")
        event.link.close()


class Closer:
    """A timer's handler: closes one connection (the peer's `--hold`)."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection

    def on_timer_task(self, event: Any) -> None:
        self.connection.close()


def say(line: str) -> None:
    print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.support.fake_peer")
    parser.add_argument("port", type=int)
    parser.add_argument("--refuse", type=int, default=0, metavar="N")
    parser.add_argument("--hold", type=float, default=None, metavar="SECONDS")
    args = parser.parse_args()
    Container(Peer(args.port, args.refuse, args.hold)).run()


if __name__ == "__main__":
    main()
