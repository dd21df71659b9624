"""enmesh.router.sections: a message's address read from its encoded bytes (proton-encoded)."""

from __future__ import annotations

import pytest
from proton import Message, symbol

from enmesh.router.sections import MalformedMessageError, message_address

ANNOTATED = Message(
    body="x" * 5000,
    address="red",
    durable=True,
    id=7,
    user_id=b"app",
    annotations={symbol("other"): 1, symbol("x-opt-qd.to"): "blue"},
    instructions={symbol("d"): [1, 2]},
    properties={"k": "v"},
).encode()


def test_to_from_properties_and_annotation() -> None:
    assert message_address(ANNOTATED, honour_annotation=False) == "red"
    assert message_address(ANNOTATED, honour_annotation=True) == "blue"


def test_long_address_and_no_address() -> None:
    assert message_address(Message(address="a" * 300).encode(), honour_annotation=True) == (
        "a" * 300
    )
    assert message_address(Message(body=1).encode(), honour_annotation=True) is None
    assert message_address(Message(id=1, body=1).encode(), honour_annotation=False) is None


@pytest.mark.parametrize("data", [ANNOTATED[:30], b"junk", b"\x00\x53\x73\xc0\x05\x03\x40"])
def test_malformed(data: bytes) -> None:
    with pytest.raises(MalformedMessageError):
        message_address(data, honour_annotation=True)
