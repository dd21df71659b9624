"""How move-stored splits a queue of expiring messages into runs (enmesh.migrate.expiry):
pure functions, no broker."""

from __future__ import annotations

from enmesh.migrate.expiry import SPREAD_MS, Expiries, Run, erlang_string, first_run


def test_a_run_holds_the_messages_expiring_within_the_spread_of_its_earliest() -> None:
    start = 1_800_000_000_000
    expiry = (start, start + 400, start + SPREAD_MS, start + SPREAD_MS + 1, start + 5000)
    assert first_run(expiry) == Run(3, start)


def test_messages_without_expiry_go_together_and_stop_at_the_first_with_one() -> None:
    assert first_run((None, None, 7000, None)) == Run(2, None)
    assert first_run((7000, None, 7000)) == Run(1, 7000)
    assert first_run(()) == Run(0, None)


def test_returned_messages_out_of_order_take_the_earliest_expiry_of_their_run() -> None:
    # A message returned to the queue comes first although it expires later than the next.
    assert first_run((10_500, 10_000, 10_900, 20_000)) == Run(3, 10_000)


def test_a_long_span_widens_the_spread_to_a_twentieth_of_it() -> None:
    expiry = tuple(range(0, 3_600_000, 1000))  # an hour of messages, one a second
    run = first_run(expiry)
    assert run == Run(180, 0)  # 3,599,000 ms // 20 = 179,950 ms: 0 to 179,000


def test_remaining_life_counts_from_when_the_node_was_read() -> None:
    found = Expiries(read_at=0.0, node_clock=1_000, quorum=True, out_to_consumers=0, expiry=())
    assert found.remaining_ms(1_000) == 0  # read long ago (monotonic 0): already due
    assert erlang_string("iot.é") == "[105,111,116,46,195,169]"
