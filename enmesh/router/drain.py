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
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from enmesh.router import demand

if TYPE_CHECKING:
    from enmesh.router.forwarding import OutLink
    from enmesh.router.inlinks import InLink
    from enmesh.router.router import Router


class StoredDrain:
    def __init__(self, router: Router) -> None:
        self.router = router
        self.waiting: dict[str, set[OutLink]] = {}  # key -> consumers whose drain is open

    def start(self, out: OutLink) -> bool:
        """`out`'s consumer drains with nothing here to send: ask the brokers; False if there
        is no broker to ask (answer now)."""
        router = self.router
        state = router.addresses.get(out.key)
        if state is None or not demand.is_stored(router, out.key):
            return False
        router.routing.retry_key(out.key)  # the consumer's credit becomes the brokers' credit
        asked = [source for source in demand.broker_sources(state) if source.link.credit > 0]
        if not asked:
            return False
        self.waiting.setdefault(out.key, set()).add(out)
        for source in asked:
            source.link.drain(0)  # use the credit, or give it back
        return True

    def on_source_flow(self, source: InLink) -> None:
        """A broker link's flow: once every one of its key's has answered, answer consumers."""
        if source.link.draining():
            return
        source.link.drain_mode = False
        if source.link.current is not None:
            # Its transfers can come in the same read as the flow that ends the drain, and
            # proton may tell of the flow first: route them before answering anyone.
            source.on_delivery(source.link.current)
        state = self.router.addresses.get(source.key)
        if state is not None and any(s.link.draining() for s in demand.broker_sources(state)):
            return
        for out in self.waiting.pop(source.key, set()):
            out.pump()
            if not out.closed and out.link.drain_mode and not out.waiting:
                out.link.drained()
        self.router.routing.retry_key(source.key)  # credit given back is no longer demand
