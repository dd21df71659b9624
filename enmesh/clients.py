"""`enmesh send` and `enmesh receive`: small AMQP 1.0 clients to try a stack.

Passwords come from a file or the ENMESH_PASSWORD environment variable, never from the
command line (where `ps` would show them). The address space is the AMQP hostname; by
default it is the part of the user after `@`.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proton import Delivery, Message, SSLDomain
from proton.handlers import MessagingHandler
from proton.reactor import Container

from enmesh.transport_hints import explain

PASSWORD_ENV = "ENMESH_PASSWORD"
DEFAULT_MECHANISMS = "SCRAM-SHA-256 PLAIN"
# A terminal outcome's name, as `Sender.outcomes` counts it.
OUTCOME_NAMES = {
    Delivery.ACCEPTED: "accepted",
    Delivery.REJECTED: "rejected",
    Delivery.RELEASED: "released",
    Delivery.MODIFIED: "modified",
}


class ClientError(Exception):
    """What went wrong, in words a user can act on."""


@dataclass(frozen=True)
class Endpoint:
    url: str
    address: str
    user: str | None
    password: str | None
    vhost: str | None
    ca: Path | None
    mechanisms: str | None
    timeout: float

    def connect(self, container: Container) -> Any:
        options = connect_options(
            self.url,
            user=self.user,
            password=self.password,
            vhost=self.vhost,
            ca=self.ca,
            mechanisms=self.mechanisms or DEFAULT_MECHANISMS,
        )
        return container.connect(**options)


def connect_options(
    url: str,
    *,
    user: str | None,
    password: str | None,
    vhost: str | None,
    ca: Path | None,
    mechanisms: str,
) -> dict[str, Any]:
    """`Container.connect` keywords for a user of an address space (ANONYMOUS if no user).

    The vhost is the AMQP hostname; proton also checks the server certificate against it.
    """
    options: dict[str, Any] = {
        "url": url,
        "reconnect": False,
        "allowed_mechs": mechanisms if user else "ANONYMOUS",
    }
    if vhost:
        options["virtual_host"] = vhost
    if user:
        options |= {"user": user, "password": password}
    if url.startswith("amqps://"):
        domain = SSLDomain(SSLDomain.MODE_CLIENT)
        if ca is not None:
            domain.set_trusted_ca_db(str(ca))
        domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME)
        options["ssl_domain"] = domain
    return options


def endpoint_from(args: Any) -> Endpoint:
    password = None
    if args.password_file is not None:
        try:
            password = Path(args.password_file).read_text(encoding="utf-8").rstrip("\n")
        except OSError as exc:
            raise ClientError(
                f"cannot read password file {args.password_file}: {exc.strerror}"
            ) from exc
    elif args.user:
        password = os.environ.get(PASSWORD_ENV)
        if password is None:
            raise ClientError(
                f"--user needs a password: use --password-file FILE or set {PASSWORD_ENV}"
            )
    vhost = args.vhost or (args.user.split("@", 1)[1] if args.user and "@" in args.user else None)
    return Endpoint(
        args.url, args.address, args.user, password, vhost, args.ca, args.mechanisms, args.timeout
    )


class _Client(MessagingHandler):
    def __init__(self, endpoint: Endpoint, **options: Any) -> None:
        super().__init__(**options)
        self.endpoint = endpoint
        self.error: str | None = None
        self.connection: Any = None
        self.timer: Any = None
        self.finished = False

    def on_start(self, event: Any) -> None:
        self.connection = self.endpoint.connect(event.container)
        self.timer = event.container.schedule(self.endpoint.timeout, self)
        self.attach(event)

    def attach(self, event: Any) -> None:
        raise NotImplementedError

    def on_timer_task(self, event: Any) -> None:
        self.error = (
            self.error or f"timed out after {self.endpoint.timeout:g} s ({self.progress()})"
        )
        self.finish()

    def progress(self) -> str:
        return ""

    def finish(self) -> None:
        self.finished = True
        if self.timer is not None:
            self.timer.cancel()
        if self.connection is not None:
            self.connection.close()

    def _failed(self, what: str, condition: Any) -> None:
        detail = f"{condition.name}: {condition.description}" if condition else "closed"
        self.error = self.error or f"{what}: {detail}"
        self.finish()

    def on_transport_error(self, event: Any) -> None:
        condition = event.transport.condition
        raw = f"{condition.name}: {condition.description}" if condition else "closed"
        endpoint = self.endpoint
        mechanisms = endpoint.mechanisms or DEFAULT_MECHANISMS
        explained = explain(endpoint.url, mechanisms=mechanisms, ca=endpoint.ca, raw=raw)
        self.error = self.error or f"connection failed: {explained}"
        self.finish()

    def on_connection_error(self, event: Any) -> None:
        self._failed("connection refused", event.connection.remote_condition)

    def on_link_error(self, event: Any) -> None:
        self._failed(f"link to {self.endpoint.address!r} refused", event.link.remote_condition)


# A paced sender wakes at most this often and sends what is due: a timer per message cost
# the simulator more CPU than the sends (a fifth of its samples at 700/s).
PACE_TICK = 0.01


class Sender(_Client):
    """Send `messages` as credit allows (at most `rate` per second when given) and count
    the outcomes the receiving end reports."""

    def __init__(
        self,
        endpoint: Endpoint,
        messages: Sequence[Message],
        rate: float | None = None,
        start_at: float | None = None,
        progress_every: float | None = None,
    ) -> None:
        super().__init__(endpoint)
        self.messages, self.rate, self.start_at = messages, rate, start_at
        self.progress_every = progress_every
        self.sent = 0
        self.outcomes = {"accepted": 0, "rejected": 0, "released": 0, "modified": 0}
        self.began = 0.0  # (monotonic) when the first message is due
        self.link: Any = None
        self.wake_pending = False  # a paced pump is scheduled

    def attach(self, event: Any) -> None:
        self.began = time.monotonic()
        if self.start_at is not None:
            self.began += self.start_at - time.time()
        self.link = event.container.create_sender(self.connection, self.endpoint.address)
        if self.progress_every:
            event.container.schedule(self.progress_every, _Progress(self))

    def on_sendable(self, event: Any) -> None:
        self.pump(event.container)

    def pump(self, container: Any) -> None:
        due = len(self.messages)
        if self.rate:
            due = min(due, max(0, int((time.monotonic() - self.began) * self.rate) + 1))
        while self.link.credit and self.sent < due:
            self.link.send(self.messages[self.sent])
            self.sent += 1
        if self.sent == due < len(self.messages) and not self.wake_pending:
            # paced: wake when the next one is due (one timer at a time: every settlement
            # calls this too)
            next_at = self.began + self.sent / self.rate  # type: ignore[operator]
            container.schedule(max(PACE_TICK, next_at - time.monotonic()), _Pump(self))
            self.wake_pending = True

    def on_settled(self, event: Any) -> None:
        name = OUTCOME_NAMES.get(event.delivery.remote_state)
        if name:
            self.outcomes[name] += 1
        if sum(self.outcomes.values()) == len(self.messages):
            self.finish()

    def progress(self) -> str:
        return f"{self.sent} of {len(self.messages)} sent; no credit means no consumer is reachable"


class _Progress(MessagingHandler):
    """Every few seconds, a line on stderr: sent, accepted, and the rate since the last."""

    def __init__(self, sender: Sender) -> None:
        super().__init__()
        self.sender = sender
        self.last = (time.monotonic(), 0)

    def on_timer_task(self, event: Any) -> None:
        sender = self.sender
        if sender.finished:
            return  # no more lines, no more timers
        now, accepted = time.monotonic(), sender.outcomes["accepted"]
        rate = (accepted - self.last[1]) / max(now - self.last[0], 1e-9)
        self.last = (now, accepted)
        total = len(sender.messages)
        print(
            f"  {sender.sent}/{total} sent, {accepted} accepted, {rate:.0f}/s",
            file=sys.stderr, flush=True,
        )  # fmt: skip
        event.container.schedule(sender.progress_every, self)


class _Pump(MessagingHandler):
    def __init__(self, sender: Sender) -> None:
        super().__init__()
        self.sender = sender

    def on_timer_task(self, event: Any) -> None:
        self.sender.wake_pending = False
        self.sender.pump(event.container)


def send_messages(
    endpoint: Endpoint,
    messages: Sequence[Message],
    rate: float | None,
    start_at: float | None = None,
    progress_every: float | None = None,
) -> Sender:
    """Send and wait for every outcome; raises ClientError if the link or connection fails.
    With `rate`, the i-th message is due i/rate seconds after `start_at` (wall-clock epoch
    seconds; default: once the link is attached, which takes a connection's set-up). With
    `progress_every`, a progress line goes to stderr that often (seconds)."""
    client = Sender(endpoint, messages, rate, start_at, progress_every)
    Container(client).run()
    if client.error:
        raise ClientError(client.error)
    return client


class Receiver(_Client):
    def __init__(self, endpoint: Endpoint, count: int | None) -> None:
        super().__init__(endpoint)
        self.count = count
        self.received = 0

    def attach(self, event: Any) -> None:
        event.container.create_receiver(self.connection, self.endpoint.address)

    def on_message(self, event: Any) -> None:
        body = event.message.body
        print(body if isinstance(body, str) else repr(body), flush=True)
        self.received += 1
        if self.count is not None and self.received >= self.count:
            self.finish()

    def progress(self) -> str:
        return f"{self.received} received"


def send(args: Any) -> int:
    expiry = {} if args.ttl is None else {"ttl": args.ttl}
    messages = [
        Message(body=args.body.replace("{n}", str(i)), subject=args.subject, **expiry)
        for i in range(args.count)
    ]
    client = send_messages(endpoint_from(args), messages, rate=None)
    summary = ", ".join(f"{n} {state}" for state, n in client.outcomes.items() if n)
    print(f"sent {client.sent} to {args.address}: {summary}")
    return 0 if client.outcomes["accepted"] == len(messages) else 1


def receive(args: Any) -> int:
    client = Receiver(endpoint_from(args), args.count)
    Container(client).run()
    if client.error and (args.count is not None or client.received == 0):
        raise ClientError(client.error)
    print(f"received {client.received} from {args.address}", file=sys.stderr)
    return 0
