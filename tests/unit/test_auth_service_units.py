"""enmesh-auth's pieces that need no Keycloak: frame codec, PLAIN, groups -> address-authz.
(The whole path, with a real Keycloak, is tests/auth.)"""

from __future__ import annotations

import pytest

from enmesh.auth import frames
from enmesh.auth.authz import address_authz
from enmesh.auth.frames import Frame, FrameError, FrameReader
from enmesh.auth.keycloak import Verdict
from enmesh.auth.service import ExchangeError, _open, parse_plain
from enmesh.router.saslrelay import _authenticated


def test_frames_round_trip_in_any_chunking() -> None:
    wire = (
        frames.SASL_HEADER
        + frames.encode(frames.SASL_FRAME, frames.SASL_INIT, ["PLAIN", b"\0u\0p", None])
        + frames.AMQP_HEADER
    )
    for size in (1, 3, 7, len(wire)):
        reader = FrameReader()
        items = [i for at in range(0, len(wire), size) for i in reader.feed(wire[at : at + size])]
        assert items[0] == frames.SASL_HEADER and items[2] == frames.AMQP_HEADER
        init = items[1]
        assert isinstance(init, Frame) and init.code == frames.SASL_INIT
        assert (init.field(0), init.field(1), init.field(2)) == ("PLAIN", b"\0u\0p", None)


def test_a_broken_frame_header_is_an_error() -> None:
    with pytest.raises(FrameError, match="bad frame header"):
        FrameReader().feed(b"\x00\x00\x00\x04\x02\x01\x00\x00")


def test_plain_response() -> None:
    assert parse_plain(b"\0alice@shop\0s3cret").username == "alice@shop"
    with pytest.raises(ExchangeError, match="malformed"):
        parse_plain(b"alice@shop")


def test_groups_grant_only_in_the_users_own_space() -> None:
    groups = ("/shop", "/shop/send_orders", "/shop/recv_orders", "/shop/manage", "/lab/send_x")
    assert address_authz("alice@shop", groups) == {
        "$management": ["recv", "send"],
        "_dynamic.*": ["send"],
        "orders": ["recv", "send"],
    }
    assert address_authz("bob@shop", ("/shop/recv_a*",)) == {"a*": ["recv"]}


def test_the_open_the_service_sends_is_what_the_router_reads() -> None:
    (item,) = FrameReader().feed(_open(Verdict(0, "bob@shop", ("/shop/recv_orders",))))
    assert isinstance(item, Frame) and item.code == frames.OPEN
    result = _authenticated(item.field(9))
    assert result.identity == "bob@shop"
    assert result.authz == {"orders": ("recv",)}
