"""An AMQP client process that registers wills: `python -m tests.support.will_client JSON`.

JSON: {"url", "user", "password", "vhost", "wills": [{"to", "body", "properties"}]}.
Each will is sent on one `$lwt` link and must be accepted; the process then prints
`registered` and waits for a line on stdin: `detach` detaches the link(s) and closes the
connection (the will is cancelled), `close` closes the connection with the link still
attached (the will is published). Killing it is the third way to end.
"""

from __future__ import annotations

import json
import sys

from proton import Message
from proton.utils import BlockingConnection

from enmesh.clients import connect_options


def main() -> None:
    spec = json.loads(sys.argv[1])
    options = connect_options(
        spec["url"],
        user=spec["user"],
        password=spec["password"],
        vhost=spec["vhost"],
        ca=None,
        mechanisms="SCRAM-SHA-256",
    )
    del options["reconnect"]
    connection = BlockingConnection(options.pop("url"), timeout=15, **options)
    sender = connection.create_sender("$lwt")
    for will in spec["wills"]:  # on one link: each replaces the one before
        message = Message(address=will["to"], body=will["body"], properties=will.get("properties"))
        sender.send(message)  # raises unless accepted
    print("registered", flush=True)
    action = sys.stdin.readline().strip()
    if action == "detach":
        sender.close()
    connection.close()
    print("ended", flush=True)


if __name__ == "__main__":
    main()
