"""Moving a queue whose messages expire without lengthening their lives.

A quorum queue with a TTL stamps each message with its absolute expiry when it enqueues
it (RabbitMQ 3.10's `rabbit_fifo`: the `expiry` of the message header, the leader's wall
clock in milliseconds), and shows it on no delivered message. A shovel republishes with
one fixed set of properties, so the target would count a message's TTL again from its
arrival. Instead such a queue moves in runs of consecutive messages, in delivery order
(messages returned to the queue first, then the rest), each run by a shovel that moves
exactly that many (`src-delete-after: N`) and gives them as `expiration` the earliest
remaining life in the run (`dest-publish-properties`). A moved message then expires on the
target no later than it would have on the source (give or take the moment it takes to
cross), and at most one run's spread earlier: `SPREAD_MS`, or a `MAX_RUNS`-th of the
queue's span of expiries when that is longer.

The expiries are read from the queue's state with `rabbitmqctl eval` (`ra:local_query`
on the queue's leader): RabbitMQ's internal API, the one of 3.10 to 3.12. Nothing else may
consume from the queue meanwhile (the order must hold): the bridge took the source's
routers off its brokers, and a queue with messages out to a consumer is refused.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from enmesh.control.brokers import BrokerError, Rabbitmqctl
from enmesh.migrate.ends import MigrateError

SPREAD_MS = 1000
MAX_RUNS = 20
NO_EXPIRY = -1
NOT_QUORUM = -2

# The node's clock, then the messages out to consumers, then each message's expiry (-1:
# none) in delivery order; [clock, -2] for a queue that is not a quorum queue.
_EXPIRIES = """\
Name = rabbit_misc:r(list_to_binary({vhost}), queue, list_to_binary({queue})),
{{ok, Q}} = rabbit_amqqueue:lookup(Name),
Now = os:system_time(millisecond),
case amqqueue:get_type(Q) of
  rabbit_quorum_queue ->
    {{ok, {{_, Found}}, _}} = ra:local_query(amqqueue:get_pid(Q), fun(S) ->
      Expiry = fun(M) -> case rabbit_fifo:get_header(expiry, rabbit_fifo:get_msg_header(M)) of
                           undefined -> -1; E -> E end end,
      [rabbit_fifo:query_messages_checked_out(S)
       | [Expiry(M) || M <- lqueue:to_list(element(5, S)) ++ lqueue:to_list(element(3, S))]]
    end),
    [Now | Found];
  _ -> [Now, -2]
end.
"""
_NUMBER = re.compile(r"-?\d+")


@dataclass(frozen=True)
class Expiries:
    read_at: float  # time.monotonic() when read
    node_clock: int  # the node's wall clock then, ms
    quorum: bool
    out_to_consumers: int
    expiry: tuple[int | None, ...]  # per message in delivery order, ms on the node's clock

    def remaining_ms(self, expires_at: int) -> int:
        """Life left now for a message expiring at `expires_at` (never below 0)."""
        now = self.node_clock + (time.monotonic() - self.read_at) * 1000
        return max(0, int(expires_at - now))


def erlang_string(text: str) -> str:
    """`text` as an Erlang list of its UTF-8 bytes: nothing in a name can break the code."""
    return "[" + ",".join(str(byte) for byte in text.encode("utf-8")) + "]"


def read_expiries(ctl: Rabbitmqctl, vhost: str, queue: str) -> Expiries:
    expression = _EXPIRIES.format(vhost=erlang_string(vhost), queue=erlang_string(queue))
    try:
        out = ctl.run("eval", expression)
    except BrokerError as error:
        raise MigrateError(
            f"cannot read when the messages of {vhost}/{queue} expire ({error}); "
            "moved by a shovel, their TTLs would restart on the target: nothing was moved"
        ) from None
    read_at = time.monotonic()
    numbers = [int(n) for n in _NUMBER.findall(out)]
    if len(numbers) < 2:
        raise MigrateError(f"{vhost}/{queue}: unexpected answer reading expiries: {out[:200]}")
    if numbers[1] == NOT_QUORUM:
        return Expiries(read_at, numbers[0], False, 0, ())
    expiry = tuple(None if n == NO_EXPIRY else n for n in numbers[2:])
    return Expiries(read_at, numbers[0], True, numbers[1], expiry)


@dataclass(frozen=True)
class Run:
    count: int  # consecutive messages from the head of the queue
    expires_at: int | None  # the earliest expiry among them; None: none of them expires


def first_run(expiry: tuple[int | None, ...]) -> Run:
    """The run at the head of the queue: messages without an expiry together, or messages
    whose expiries lie within the spread of the run's earliest."""
    if not expiry:
        return Run(0, None)
    if expiry[0] is None:
        count = next((i for i, e in enumerate(expiry) if e is not None), len(expiry))
        return Run(count, None)
    stamped = [e for e in expiry if e is not None]
    spread = max(SPREAD_MS, (max(stamped) - min(stamped)) // MAX_RUNS)
    low = high = expiry[0]
    count = 0
    for e in expiry:
        if e is None or max(high, e) - min(low, e) > spread:
            break
        low, high, count = min(low, e), max(high, e), count + 1
    return Run(count, low)
