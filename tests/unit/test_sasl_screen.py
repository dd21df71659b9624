"""The SASL input screen: what it refuses, what it lets through, however the bytes arrive."""

from __future__ import annotations

import pytest

from enmesh.router.saslscreen import SaslInputScreen
from tests.support import probes

INIT = probes.frame(probes.described(0x41, [probes.symbol("ANONYMOUS")]), sasl=True)
RESPONSE = probes.frame(probes.described(0x43, [b"\xa0\x03abc"]), sasl=True)
HEADER = probes.SASL_HEADER


def _feed(data: bytes, chunk: int) -> tuple[str | None, SaslInputScreen]:
    screen = SaslInputScreen()
    for at in range(0, len(data), chunk):
        refusal = screen.feed(data[at : at + chunk])
        if refusal:
            return refusal, screen
    return None, screen


@pytest.mark.parametrize("chunk", [1, 3, 7, 4096])
def test_a_response_before_the_init_is_refused(chunk: int) -> None:
    refusal, _ = _feed(HEADER + RESPONSE, chunk)
    assert refusal == "SASL protocol error: sasl-response before sasl-init"


@pytest.mark.parametrize("chunk", [1, 5, 4096])
def test_a_second_init_is_refused(chunk: int) -> None:
    refusal, _ = _feed(HEADER + INIT + INIT, chunk)
    assert refusal == "SASL protocol error: a second sasl-init"


@pytest.mark.parametrize("chunk", [1, 2, 9, 4096])
def test_init_responses_and_the_amqp_layer_pass(chunk: int) -> None:
    login = HEADER + INIT + RESPONSE + RESPONSE  # SCRAM: init, then a response per challenge
    refusal, screen = _feed(login + probes.AMQP_HEADER + probes.open_frame(b"c", b"h"), chunk)
    assert refusal is None and screen.done


def test_a_long_descriptor_and_an_empty_frame_are_read_as_frames() -> None:
    ulong_response = b"\x00\x80" + (0x43).to_bytes(8, "big") + b"\x45"
    heartbeat = b"\x00\x00\x00\x08\x02\x01\x00\x00"
    refusal, _ = _feed(HEADER + heartbeat + probes.frame(ulong_response, sasl=True), 1)
    assert refusal == "SASL protocol error: sasl-response before sasl-init"


@pytest.mark.parametrize("start", [probes.AMQP_HEADER, b"\x16\x03\x01\x02\x00", b"GET / HTTP"])
def test_other_protocols_are_not_screened(start: bytes) -> None:
    screen = SaslInputScreen()
    assert screen.feed(start + b"\x00" * 8) is None and screen.done
    assert screen.feed(RESPONSE) is None
