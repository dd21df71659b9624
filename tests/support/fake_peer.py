"""A route-container peer in a process of its own, for tests of a router's connectors,
autoLinks and linkRoutes: `python -m tests.support.fake_peer PORT` listens on
127.0.0.1:PORT, accepts every connection and link, and prints one line per event
(`listening`, `open`, `attach <our role> <address>`, `detach <address>`).

A process of its own because Cyrus SASL is set up once per process: a proton server in
the test process would fix Cyrus to its defaults, and a router run inside the test
process later (tests/support/inprocess.py) could no longer read its own SASL database.
"""

from __future__ import annotations

import sys
from typing import Any

from proton.handlers import MessagingHandler
from proton.reactor import Container


class Peer(MessagingHandler):  # type: ignore[misc]
    def __init__(self, port: int) -> None:
        super().__init__()
        self.port = port

    def on_start(self, event: Any) -> None:
        event.container.listen(f"127.0.0.1:{self.port}")
        say("listening")

    def on_connection_opened(self, event: Any) -> None:
        say("open")

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


def say(line: str) -> None:
    print(line, flush=True)


if __name__ == "__main__":
    Container(Peer(int(sys.argv[1]))).run()
