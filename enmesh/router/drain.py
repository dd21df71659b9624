"""Drain on a stored address: the broker is asked before the consumer hears "nothing".

A consumer that drains (Qpid JMS's receiveNoWait, proton's `Receiver.drain`) asks for
what is there now, and to have its credit back if there is nothing. For a queue the
messages are in the broker: stored messages leave it only for consumers' credit
(enmesh.router.demand), so at the moment of the drain the router usually holds none. It
gives the consumer's credit to its broker links as usual, drains them too, and answers the
consumer's drain only once every broker link has answered its own: what the broker had by
then has been delivered to the consumer first.

A router without a broker link for the key (fed over transit links) answers at once, with
what it holds, as qdrouterd 1.19 does for any address.

While a broker link drains, its credit is left alone (InLink.refresh): a top-up would carry
the drain flag again, a second drain request crossing the broker's answer to the first.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from enmesh.router import demand

if TYPE_CHECKING:
    from enmesh.router.forwarding import OutLink
    from enmesh.router.inlinks import InLink
    from enmesh.router.loop import Timer
    from enmesh.router.router import Router

log = logging.getLogger("enmesh.router.drain")

# RabbitMQ answers a drain at once when its queue is idle; this bounds a broker that does not.
ANSWER_WITHIN_SECONDS = 2.0


class StoredDrain:
    def __init__(self, router: Router) -> None:
        self.router = router
        self.waiting: dict[str, set[OutLink]] = {}  # key -> consumers whose drain is open
        self.timers: dict[str, Timer] = {}  # key -> when to stop waiting for its brokers

    def start(self, out: OutLink) -> bool:
        """`out`'s consumer drains with nothing here to send: ask the brokers; False if there
        is no broker to ask (answer now)."""
        router = self.router
        state = router.addresses.get(out.key)
        if state is None or not demand.is_stored(router, out.key):
            return False
        sources = demand.broker_sources(state)
        if any(source.link.drain_mode for source in sources):
            # A drain of the brokers is already out: this consumer waits for its answer.
            # Asking again, or topping the credit up meanwhile, repeats the drain flag to a
            # broker that has already answered (RabbitMQ then never answers the repeat).
            self.waiting.setdefault(out.key, set()).add(out)
            return True
        router.routing.retry_key(out.key)  # the consumer's credit becomes the brokers' credit
        asked = [source for source in sources if source.link.credit > 0]
        if not asked:
            return False
        self.waiting.setdefault(out.key, set()).add(out)
        for source in asked:
            source.link.drain(0)  # use the credit, or give it back
        key = out.key
        self.timers[key] = router.loop.call_later(
            ANSWER_WITHIN_SECONDS, lambda: self._give_up(key, asked)
        )
        return True

    def _give_up(self, key: str, asked: list[InLink]) -> None:
        """A broker that has not answered its drain in time: answer the consumers with what
        arrived, so a receiveNoWait never hangs on a broker."""
        self.timers.pop(key, None)
        late = [source for source in asked if not source.closed and source.link.drain_mode]
        if not late or key not in self.waiting:
            return
        log.warning(
            "a broker did not answer a drain of %s within %ss: consumers answered without it",
            key,
            ANSWER_WITHIN_SECONDS,
        )
        for source in late:
            source.link.drain_mode = False
        self._answer(key)

    def on_source_flow(self, source: InLink) -> None:
        """A broker link's flow: once every one of its key's has answered, answer consumers."""
        if source.link.draining():
            return
        source.link.drain_mode = False
        if source.link.current is not None:
            # Its transfers can come in the same read as the flow that ends the drain, and
            # proton may tell of the flow first: route them before answering anyone.
            source.on_delivery()
        state = self.router.addresses.get(source.key)
        if state is not None and any(s.link.draining() for s in demand.broker_sources(state)):
            return
        self._answer(source.key)

    def _answer(self, key: str) -> None:
        timer = self.timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        for out in self.waiting.pop(key, set()):
            out.pump()
            if not out.closed and out.link.drain_mode and not out.waiting:
                out.link.drained()
        self.router.routing.retry_key(key)  # credit given back is no longer demand
