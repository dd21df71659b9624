"""Wills for AMQP clients: MQTT's "last will and testament", kept by the router.

The contract (docs/router.md, "Wills"):
- A client attaches a sender link with target `$lwt` and sends its will on it: an AMQP
  message whose `to` is where to publish it, in the client's address space. The router
  checks it as it checks a message of that client's anonymous sender (the user's policy
  must allow sending to `to`; no `to`, `@` or an unavailable address is refused) and
  rejects a will it would refuse; otherwise it stores it, then accepts it. Another message
  on the link replaces the will. One will per link.
- The client detaches the link without an error: the will is cancelled.
- The link ends any other way (the connection dropped or closed with the link attached,
  its session ended, a detach carrying an error): the router publishes the will as a
  message of that client, unsettled, once a consumer is reachable. It is sent again if
  released, dropped (logged) if rejected or not taken within PUBLISH_WINDOW seconds.
- With `--will-store FILE` a will outlives the process: one still stored when the router
  starts belongs to a connection that ended with the previous process (crash, kill, host
  restart, stop), and is published if the user may still send to its address.

Why in the router and not a will service behind a link route: the router knows who the
client is and what its policy allows, so a will can do exactly what its client could, no
more. A service at the end of a link route sees a link, not a user.
"""

from __future__ import annotations

import functools
import logging
import sqlite3
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from proton import Disposition, Link, Receiver

from enmesh.router import annotations as qd_annotations
from enmesh.router import streaming, tally, tenancy
from enmesh.router.annotations import AnnotationError, strips_in
from enmesh.router.clientlinks import refuse
from enmesh.router.forwarding import ACCEPTED, Held, set_address
from enmesh.router.inlinks import InLink
from enmesh.router.outcomes import Fanout, Outcome
from enmesh.router.relay import WILL_ADDRESS, Relay, reject, send_refusal
from enmesh.router.sections import MalformedMessageError, message_address
from enmesh.router.will_store import StoredWill, WillStore, WillStoreError

if TYPE_CHECKING:
    from enmesh.router.connecting import ConnectionInfo
    from enmesh.router.loop import Timer
    from enmesh.router.router import Router
    from enmesh.router.saslrelay import Authenticated

log = logging.getLogger("enmesh.router.wills")
PUBLISH_WINDOW = 60.0  # seconds a published will waits for a consumer to take it
MAX_WILL_LINKS = 16  # per connection: each holds a will in memory and on disk
LIMIT = "amqp:resource-limit-exceeded"
UNAVAILABLE = "unavailable"
RETRY_AFTER = 1.0  # a will released by its consumer is offered again after this


@dataclass(eq=False)
class Will:
    row: int  # in the store
    hostname: str  # the vhost whose policy decides (as the connection was admitted)
    user: str
    address: str  # `to`, as the client named it
    internal: str  # `to` inside the router (`<space>/<to>` on a multi-tenant listener)
    message: bytes
    authenticated: Authenticated | None = None  # an auth service's rights (live wills only)
    deadline: float = 0.0
    in_flight: bool = False

    def describe(self) -> str:
        space = f" in {self.hostname!r}" if self.hostname else ""
        return f"will of {self.user!r} to {self.address!r}{space}"


class WillLink(InLink):
    """A client's sender on `$lwt`: every message it sends becomes the link's will."""

    def __init__(self, link: Receiver, wills: Wills, info: ConnectionInfo) -> None:
        # One will at a time: each is a disk write, so a client gets credit for the next
        # only once the last one is stored.
        super().__init__(link, info.internal(WILL_ADDRESS), 1, self._register)
        self.wills, self.info = wills, info
        self.will: Will | None = None
        self.routable = True
        self.strip_in = strips_in(info.strip)  # router annotations checked as a producer's
        link.enmesh_will = self

    def _register(self, held: Held) -> bool:
        self.wills.register(self, held)
        return True


class Wills:
    """The wills registered with this router, and those being published."""

    def __init__(self, router: Router, store: WillStore) -> None:
        self.router = router
        self.store = store
        self.pending: list[Will] = []
        self.registered = 0  # wills held for open links (a gauge)
        self.published = self.dropped = 0  # counters
        self._timer: Timer | None = None

    # --- registering ---------------------------------------------------------------------

    def attach(self, info: ConnectionInfo, link: Link) -> None:
        """A client link on `$lwt`: a sender becomes a will link; a receiver is refused."""
        if link.is_sender:
            refuse(link, "amqp:not-allowed", f"{WILL_ADDRESS} takes wills: attach a sender")
            return
        if info.will_links >= MAX_WILL_LINKS:
            refuse(link, LIMIT, f"at most {MAX_WILL_LINKS} {WILL_ADDRESS} links per connection")
            return
        info.will_links += 1
        link.target.address = WILL_ADDRESS
        set_address(link.source, link.remote_source.address)
        link.open()
        WillLink(cast(Receiver, link), self, info).refresh()

    def register(self, link: WillLink, held: Held) -> None:
        """A will sent on `link`: checked as the client's own message, stored, accepted."""
        if held.stream is not None:
            reject(held, LIMIT, _TOO_LARGE)
            return
        try:
            address = message_address(
                held.data, honour_annotation=Relay.honours_annotation(link.info)
            )
        except MalformedMessageError as exc:
            reject(held, "amqp:decode-error", f"invalid message format: {exc}")
            return
        problem = send_refusal(self.router, link.info, address)
        if problem is not None:
            reject(held, *problem)
            return
        to = cast(str, address)
        info = link.info
        hostname = info.vhost.hostname if info.vhost is not None else info.vhost_name
        stored = StoredWill(0, hostname, info.user, to, info.internal(to), held.data)
        previous = link.will
        try:
            row = self.store.put(previous.row if previous else None, stored)
        except WillStoreError as exc:
            log.error("will of %r not stored: %s", info.user, exc)
            reject(held, "amqp:internal-error", "the router cannot store wills now")
            return
        if previous is None:
            self.registered += 1
        link.will = Will(row, hostname, info.user, to, stored.internal, held.data)
        link.will.authenticated = info.authenticated
        held.settle_origin(ACCEPTED)

    def detached(self, link: Link) -> None:
        """The client detached a link (closed or not): a will link without an error
        cancels its will."""
        will_link: WillLink | None = getattr(link, "enmesh_will", None)
        if will_link is not None and not will_link.closed:
            will_link.info.will_links -= 1  # room for another on this connection
        will = self._take(link)
        if will is None:
            return
        condition = link.remote_condition
        if condition is None:
            self.store.delete(will.row)
            return
        log.info("%s: link detached with %s: publishing", will.describe(), condition.name)
        self._publish(will)

    def lost(self, link: Link) -> None:
        """A link gone without a detach (its connection or session ended)."""
        will = self._take(link)
        if will is not None:
            log.info(
                "%s: connection ended with the will link attached: publishing", will.describe()
            )
            self._publish(will)

    def _take(self, link: Link) -> Will | None:
        """The will a will link holds, which it holds no more."""
        will_link: WillLink | None = getattr(link, "enmesh_will", None)
        if will_link is None or will_link.will is None:
            return None
        will, will_link.will = will_link.will, None
        self.registered -= 1
        return will

    # --- publishing ---------------------------------------------------------------------

    def recover(self) -> None:
        """At start: publish the wills whose connections ended with the previous process."""
        try:
            found = self.store.all()
        except sqlite3.Error as exc:  # the router runs on; only these wills are lost
            log.error("wills in %s not read: %s", self.store.path, exc)
            return
        for stored in found:
            internal = stored.internal or _legacy_internal(stored.hostname, stored.address)
            will = Will(
                stored.row,
                stored.hostname,
                stored.user,
                stored.address,
                internal,
                stored.message,
            )
            log.info(
                "%s: its connection ended with the previous process: publishing", will.describe()
            )
            self._publish(will)

    def _refusal(self, will: Will) -> str | None:
        """Why a will may not go out now: its user's rights are checked again, against
        the policy as it is (a reload may have removed the user or the address)."""
        if self.router.policy_enabled:
            vhosts = self.router.vhosts
            admitted = tenancy.admit(vhosts, will.hostname, will.user, will.authenticated)
            if isinstance(admitted, str):
                return admitted
            if not admitted.group.allows_target(will.address):
                return "the user may no longer send there"
        if self.router.routing.semantics(will.internal).distribution == UNAVAILABLE:
            return "its address is unavailable"
        return None

    def _publish(self, will: Will) -> None:
        problem = self._refusal(will)
        if problem is not None:
            self._drop(will, f"not published: {problem}")
            return
        will.deadline = self.router.loop.now() + PUBLISH_WINDOW
        self.pending.append(will)
        self.retry()

    def retry(self) -> None:
        """Consumers, credit or the mesh changed (or a timer fired): offer pending wills."""
        if not self.pending:
            return
        now = self.router.loop.now()
        for will in list(self.pending):
            if will.in_flight:
                continue
            if now >= will.deadline:
                self._drop(will, f"not published: no consumer took it within {PUBLISH_WINDOW:g} s")
            else:
                self._offer(will)
        self._schedule()

    def _offer(self, will: Will) -> None:
        routing = self.router.routing
        key = routing.semantics(will.internal).key(will.internal, 0)
        if not routing.reachable(key):
            return
        try:
            found = qd_annotations.inbound(will.message, strip=True)
        except (AnnotationError, MalformedMessageError):
            found = None
        fanout = Fanout(functools.partial(self._settled, will))
        held = Held(will.message, None, None, key=key, ann=found, fanout=fanout)
        will.in_flight = True
        if routing.route_to(held, key, None):
            routing.address_counts(key)[tally.IN_CLIENT] += 1
        else:
            will.in_flight = False  # no credit right now: offered again at the next change

    def _settled(self, will: Will, outcome: Outcome) -> None:
        will.in_flight = False
        if outcome.state == ACCEPTED:
            self._done(will)
            self.published += 1
            log.info("%s: published", will.describe())
        elif outcome.state == Disposition.REJECTED:
            condition = outcome.condition
            self._drop(will, f"rejected: {condition.name if condition else 'no condition'}")
        else:  # released or modified: the consumer did not take it; offer it again
            self.router.loop.call_later(RETRY_AFTER, self.retry)

    def _drop(self, will: Will, why: str) -> None:
        log.warning("%s: %s", will.describe(), why)
        self.dropped += 1
        self._done(will)

    def _done(self, will: Will) -> None:
        self.store.delete(will.row)
        if will in self.pending:
            self.pending.remove(will)

    def _schedule(self) -> None:
        """Wake up at the next deadline, so an unpublished will is dropped in time.

        `retry` runs on every routing change: the timer is replaced only when the next
        deadline moves (a cancelled timer stays in the loop's heap until it is due)."""
        waiting = [w.deadline for w in self.pending if not w.in_flight]
        deadline = min(waiting) if waiting else None
        timer = self._timer
        if timer is not None and not timer.cancelled and timer.deadline == deadline:
            return
        if timer is not None:
            timer.cancel()
        self._timer = None if deadline is None else self.router.loop.call_at(deadline, self.retry)


_TOO_LARGE = f"a will may be at most {streaming.Q2_UPPER} bytes"


def _legacy_internal(hostname: str, address: str) -> str:
    """The internal address of a will stored without one: a tenant's space prefixes it."""
    return f"{hostname}/{address}" if hostname and hostname != tenancy.DEFAULT_VHOST else address
