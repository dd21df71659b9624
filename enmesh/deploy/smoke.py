"""`enmesh smoke`: one real message through every address type of a running stack.

Per standard address space, the first address of each type is exercised across
routers (sender on the first router, receivers on the others) with real credentials:

- anycast: one receiver, one message, accepted end to end;
- multicast: a receiver on every other router; messages are sent until each one got
  a copy (credit arrives once *one* consumer is reachable, the others may still be
  propagating through the mesh);
- queue: stored on the broker by one router, received through another;
- topic: a subscriber attached through one router gets what another router sends;
- subscription: a message sent to its topic is read from `topic::subscription`;
- deadletter: a message sent to a queue that names it, rejected once, arrives there.

Users are picked from the compiled vhost policies, or a Keycloak stack's rights files
(who may send to / receive from the address); a type no user may use is reported as
skipped. Every message carries a fresh
nonce. A store the check would use (a queue, a dead-letter queue, a subscription, and
for a topic its subscriptions) is checked only when the brokers say it is empty (their
Prometheus endpoint); one that holds messages is reported as skipped and never attached
to: RabbitMQ 3.10 counts a message given back as a delivery attempt, so even a look
would move its messages towards the dead-letter queue. A copy a check sends into a
subscription is taken back. A stored message without the nonce that still turns up
(one that arrived meanwhile) is released, left in place, and the check fails with what
to do. Brokered spaces are not routed: not checked here.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from proton import Message, Timeout
from proton.reactor import AtMostOnce
from proton.utils import BlockingConnection, BlockingReceiver, BlockingSender

from enmesh.clients import DEFAULT_MECHANISMS, connect_options
from enmesh.compile.identity import RIGHTS_DIR
from enmesh.compile.layout import standard_broker_name
from enmesh.deploy import queue_depth
from enmesh.router.policy import Vhost, VhostGroup, parse_policy_file

TIMEOUT = 30.0
SMOKE_SUBJECT = "enmesh-smoke"


class SmokeError(Exception):
    """A check failed; the message names the address, the routers and the cause."""


class Skipped(Exception):  # noqa: N818 (a reason to skip, not an error)
    """The check cannot run; the message says why."""


class NotApplicable(Skipped):
    """The model gives no user the rights this check needs."""


class Occupied(Skipped):
    """A store the check would use holds messages (left in place, not attached to)."""


@dataclass(frozen=True)
class Access:
    """Who may do what in one space: the compiled vhost policy, read as the router reads it."""

    vhost: Vhost

    @staticmethod
    def load(policy_file: Path) -> Access:
        (vhost,) = parse_policy_file(json.loads(policy_file.read_text(encoding="utf-8")))
        return Access(vhost)

    @staticmethod
    def of_space(build_dir: Path, space: str) -> Access:
        """The space's rights: its vhost policy, or on a Keycloak stack (whose policies name
        no user) the rights its users' Keycloak groups grant (enmesh.compile.identity)."""
        rights = build_dir / RIGHTS_DIR / f"{space}.json"
        policy = build_dir / "auth" / "policies" / f"{space}.json"
        return Access.load(rights if rights.is_file() else policy)

    def _first(self, allowed: Callable[[VhostGroup, str], bool], address: str) -> str | None:
        for user in sorted(u for g in self.vhost.groups.values() for u in g.users):
            group = self.vhost.group_for(user)
            if group is not None and allowed(group, address):
                return user
        return None

    def receiver(self, address: str) -> str | None:
        return self._first(VhostGroup.allows_source, address)

    def sender(self, address: str) -> str | None:
        return self._first(VhostGroup.allows_target, address)


@dataclass(frozen=True)
class Stack:
    """What the smoke check needs of a rendered stack, from the deployer's side."""

    deployment: dict[str, Any]
    build_dir: Path
    secrets_dir: Path
    ca: Path

    @property
    def urls(self) -> list[str]:
        return [f"amqps://{r['host']}:{r['ports']['amqps']}" for r in self.deployment["routers"]]

    def password(self, identity: str) -> str:
        user = next(u for u in self.deployment["users"] if u["identity"] == identity)
        ref = next(s for s in self.deployment["secrets"] if s["name"] == user["secret"])
        secret: Path = self.secrets_dir / ref["name"] / ref["key"]
        return secret.read_text(encoding="utf-8").rstrip("\r\n")

    @contextmanager
    def connect(
        self, url: str, identity: str, space: str, timeout: float = TIMEOUT
    ) -> Iterator[BlockingConnection]:
        """A blocking connection as `identity` of `space`; `timeout` bounds every wait
        (an outcome included)."""
        options = connect_options(
            url,
            user=identity,
            password=self.password(identity),
            vhost=space,
            ca=self.ca,
            # SCRAM where the routers check passwords themselves; PLAIN (inside TLS) where
            # they relay logins to enmesh-auth (a Keycloak stack).
            mechanisms=DEFAULT_MECHANISMS,
        )
        options.pop("reconnect")
        connection = BlockingConnection(timeout=timeout, **options)
        try:
            yield connection
        finally:
            connection.close()


def _message(nonce: str) -> Message:
    return Message(body=f"smoke {nonce}", subject=SMOKE_SUBJECT, durable=True)


def _expect(
    receiver: BlockingReceiver,
    nonce: str,
    where: str,
    settle: Callable[[], None] | None = None,
) -> None:
    """Receive the message carrying `nonce`.

    Earlier smoke messages (e.g. a topic check's copy in a subscription) are consumed;
    anyone else's message is released, left in place, and the check fails.
    """
    while True:
        message = receiver.receive(timeout=TIMEOUT)
        if message.body == f"smoke {nonce}":
            (settle or receiver.accept)()
            return
        if message.subject != SMOKE_SUBJECT:
            receiver.release(delivered=False)
            raise SmokeError(
                f"{where}: found a message that is not the smoke check's (left in place); "
                "the address holds older messages: consume them, then run the check again"
            )
        receiver.accept()


@dataclass
class Check:
    kind: str
    space: str
    address: str
    run: Callable[[], str]


class SmokeCheck:
    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.urls = stack.urls

    def checks(self) -> Iterator[Check]:
        standard = {u["space"] for u in self.stack.deployment["users"]}
        by_space: dict[str, dict[str, dict[str, str]]] = {}
        for entry in self.stack.deployment["addresses"]:
            if entry["space"] in standard:
                by_space.setdefault(entry["space"], {}).setdefault(entry["type"], entry)
        for space in sorted(by_space):
            access = Access.of_space(self.stack.build_dir, space)
            first = by_space[space]
            for kind, entry in sorted(first.items()):
                runner = getattr(self, f"_{kind}")
                yield Check(kind, space, entry["address"], partial(runner, space, entry, access))

    def _users(self, access: Access, send_to: str, receive_from: str) -> tuple[str, str]:
        sender, receiver = access.sender(send_to), access.receiver(receive_from)
        if sender is None or receiver is None:
            missing = "send to" if sender is None else "receive from"
            raise NotApplicable(
                f"no user may {missing} {send_to if sender is None else receive_from}"
            )
        return sender, receiver

    def _send(self, space: str, identity: str, address: str, message: Message) -> None:
        with self.stack.connect(self.urls[0], identity, space) as connection:
            connection.create_sender(address).send(message, timeout=TIMEOUT)

    def _ensure_empty(self, space: str, addresses: list[str]) -> None:
        """Raise Occupied if a broker holds messages in one of these stores."""
        try:
            depths = queue_depth.read(self.stack.deployment["brokers"])
        except queue_depth.DepthUnknown as exc:
            raise Skipped(f"{exc}; stores are not attached to unless known empty") from exc
        for address in addresses:
            held = depths.get(standard_broker_name(space, address), 0)
            if held:
                raise Occupied(
                    f"{space}/{address} holds {held} message(s) (left in place); it is "
                    "checked once they are consumed"
                )

    def _subscriptions(self, space: str, topic: str) -> list[dict[str, str]]:
        return sorted(
            (
                a
                for a in self.stack.deployment["addresses"]
                if a["space"] == space and a["type"] == "subscription"
                and _topic_of(a["link"]) == topic
            ),
            key=lambda a: a["link"],
        )  # fmt: skip

    def _take_back(self, space: str, access: Access, links: list[str], nonce: str) -> None:
        """Consume the copy of the message carrying `nonce` from each of `links`."""
        for link in links:
            user = access.receiver(link)
            if user is None:
                raise NotApplicable(f"no user may receive from {link} (to take a copy back)")
            with self.stack.connect(self.urls[-1], user, space) as connection:
                _expect(connection.create_receiver(link, credit=1), nonce, f"{space}/{link}")

    def _via_topic(self, space: str, topic: str, receive_from: str, access: Access) -> str:
        """A pass-through by way of a topic: its subscriptions must be empty first, and
        the copies it leaves there are taken back."""
        subscriptions = self._subscriptions(space, topic)
        self._ensure_empty(space, [s["address"] for s in subscriptions])
        nonce = secrets.token_hex(8)
        detail = self._pass_through(space, topic, receive_from, access, nonce)
        others = [s["link"] for s in subscriptions if s["link"] != receive_from]
        self._take_back(space, access, others, nonce)
        return detail

    def _pass_through(
        self,
        space: str,
        send_to: str,
        receive_from: str,
        access: Access,
        nonce: str | None = None,
    ) -> str:
        """Attach a receiver on the last router, send through the first, expect the nonce.

        The send runs in its own thread: on a direct address the sender's delivery is
        settled only when the receiver accepts it (settlement travels end to end), and
        that is checked too: the sender must see `accepted`.
        """
        sender, receiver_user = self._users(access, send_to, receive_from)
        nonce = nonce or secrets.token_hex(8)
        failures: list[BaseException] = []

        def send() -> None:
            try:
                self._send(space, sender, send_to, _message(nonce))
            except BaseException as exc:  # reported by the main thread
                failures.append(exc)

        with self.stack.connect(self.urls[-1], receiver_user, space) as connection:
            receiver = connection.create_receiver(receive_from, credit=1)
            sending = threading.Thread(target=send, name="smoke-sender", daemon=True)
            sending.start()
            _expect(receiver, nonce, f"{space}/{receive_from}")
            _pump_until_done(connection, sending)
        if failures:
            raise SmokeError(f"{space}/{send_to}: sending failed: {failures[0]}")
        return f"{self.urls[0]} -> {self.urls[-1]}"

    def _anycast(self, space: str, entry: dict[str, str], access: Access) -> str:
        return self._pass_through(space, entry["address"], entry["address"], access)

    def _queue(self, space: str, entry: dict[str, str], access: Access) -> str:
        self._ensure_empty(space, [entry["address"]])
        return self._anycast(space, entry, access)

    def _topic(self, space: str, entry: dict[str, str], access: Access) -> str:
        return self._via_topic(space, entry["address"], entry["address"], access)

    def _subscription(self, space: str, entry: dict[str, str], access: Access) -> str:
        return self._via_topic(space, _topic_of(entry["link"]), entry["link"], access)

    def _multicast(self, space: str, entry: dict[str, str], access: Access) -> str:
        address = entry["address"]
        sender, receiver_user = self._users(access, address, address)
        others = self.urls[1:] or self.urls
        with ExitStack() as exits:
            connections = [
                exits.enter_context(self.stack.connect(url, receiver_user, space)) for url in others
            ]
            receivers = [c.create_receiver(address, credit=100) for c in connections]
            pending = set(range(len(receivers)))
            deadline = time.monotonic() + TIMEOUT
            with self.stack.connect(self.urls[0], sender, space) as connection:
                # Presettled, as multicast travels: an unsettled copy now settles only when
                # every receiver has (qdrouterd 1.19), and these receivers just look.
                link = connection.create_sender(address, options=AtMostOnce())
                while pending and time.monotonic() < deadline:
                    link.send(_message(secrets.token_hex(8)), timeout=TIMEOUT)
                    # A settled send returns at once: let the connection write it out.
                    connection.wait(lambda: _written(link), timeout=TIMEOUT)
                    for index in sorted(pending):
                        if _drain_smoke(receivers[index]):
                            pending.discard(index)
            if pending:
                missed = ", ".join(others[i] for i in sorted(pending))
                raise SmokeError(f"{space}/{address}: no copy reached receivers on {missed}")
        return f"{self.urls[0]} -> {', '.join(others)}"

    def _deadletter(self, space: str, entry: dict[str, str], access: Access) -> str:
        dlq = entry["address"]
        feeding = next(
            (
                a
                for a in self.stack.deployment["addresses"]
                if a["space"] == space
                and a.get("deadLetterAddress") == dlq
                and a["type"] == "queue"
            ),
            None,
        )
        if feeding is None:
            raise NotApplicable(f"no queue names {dlq} as its dead-letter address")
        queue = feeding["address"]
        sender, receiver_user = self._users(access, queue, queue)
        if access.receiver(dlq) is None:
            raise NotApplicable(f"no user may receive from {dlq}")
        self._ensure_empty(space, [queue, dlq])
        nonce = secrets.token_hex(8)
        self._send(space, sender, queue, _message(nonce))
        with self.stack.connect(self.urls[-1], receiver_user, space) as connection:
            receiver = connection.create_receiver(queue, credit=1)
            _expect(receiver, nonce, f"{space}/{queue}", settle=receiver.reject)
        with self.stack.connect(self.urls[-1], access.receiver(dlq) or "", space) as connection:
            _expect(connection.create_receiver(dlq, credit=1), nonce, f"{space}/{dlq}")
        return f"{queue} rejected -> {dlq}"


def _topic_of(link: str) -> str:
    """`alerts::audit` -> `alerts` (a subscription's link address names its topic)."""
    return link.split("::", 1)[0]


def _pump_until_done(connection: BlockingConnection, sending: threading.Thread) -> None:
    """Keep this connection's I/O going (the accept must reach the sender) until it is done.

    Nothing wakes this connection's loop when the other thread finishes, so it is run
    in short slices.
    """
    deadline = time.monotonic() + TIMEOUT
    while sending.is_alive() and time.monotonic() < deadline:
        with suppress(Timeout):
            connection.wait(lambda: not sending.is_alive(), timeout=0.05)


def _written(sender: BlockingSender) -> bool:
    """Every message handed to the sender is on the wire (nothing queued or buffered)."""
    link = sender.link
    transport = link.connection.transport
    return not link.queued and (transport is None or transport.pending() <= 0)


def _drain_smoke(receiver: BlockingReceiver) -> bool:
    """Take whatever multicast copies arrived (presettled: nothing to accept)."""
    got = False
    while True:
        try:
            receiver.receive(timeout=0.2)
        except Timeout:  # nothing more for now
            return got
        got = True
