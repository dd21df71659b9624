"""enmesh.router.rawproton: the router's wrapper-free calls agree with proton-python's.

Two proton engines joined in memory (no sockets): a sender and a receiver link, real
deliveries, dispositions travelling between them.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from proton import (
    Collector,
    Connection,
    Delivery,
    Disposition,
    LinkException,
    Receiver,
    Sender,
    Transport,
)

from enmesh.router import rawproton


class Pair:
    """A client and a server engine with one link each way of a `sender` -> `receiver`."""

    def __init__(self) -> None:
        self.client, self.server = Connection(), Connection()
        self.client_transport, self.server_transport = Transport(), Transport(Transport.SERVER)
        self.client_transport.bind(self.client)
        self.server_transport.bind(self.server)
        self.collector = Collector()
        self.server.collect(self.collector)
        self.client.open()
        session = self.client.session()
        session.open()
        self.sender: Sender = session.sender("out")
        self.sender.target.address = "q"
        self.sender.open()
        self.pump()
        self.server.open()
        server_session = self.server.session_head(0)
        assert server_session is not None
        server_session.open()
        link = self.server.link_head(0)
        assert isinstance(link, Receiver)
        self.receiver: Receiver = link
        self.receiver.open()
        self.receiver.flow(10)
        self.pump()

    def pump(self) -> None:
        """Move bytes both ways until neither engine has any to write."""
        moved = True
        while moved:
            moved = False
            for source, sink in (
                (self.client_transport, self.server_transport),
                (self.server_transport, self.client_transport),
            ):
                pending = source.pending()
                if pending > 0:
                    sink.push(source.peek(pending) or b"")
                    source.pop(pending)
                    moved = True

    def accept(self, arrived: Delivery) -> None:
        """Read the receiver's current delivery, accept and settle it."""
        self.receiver.recv(arrived.pending)
        self.receiver.advance()
        rawproton.update(arrived, Disposition.ACCEPTED)
        arrived.settle()
        self.pump()

    def send(self, tag: str, body: bytes) -> rawproton.LeanDelivery:
        delivery = rawproton.new_delivery(self.sender, tag.encode())
        self.sender.send(body)
        self.sender.advance()
        self.pump()
        return delivery


@pytest.fixture
def pair() -> Iterator[Pair]:
    yield Pair()


def test_current_and_new_delivery_wrap_the_same_objects_as_proton(pair: Pair) -> None:
    sent = pair.send("tag-1", b"payload")
    assert isinstance(sent, Delivery)
    assert sent.tag == "tag-1"

    arrived = rawproton.current(pair.receiver)
    assert arrived is not None
    assert arrived == pair.receiver.current  # the same pn_delivery_t
    assert arrived.tag == "tag-1"
    assert rawproton.delivery_tag(arrived._impl) == b"tag-1"
    assert pair.receiver.recv(arrived.pending) == b"payload"
    pair.receiver.advance()
    assert rawproton.current(pair.receiver) is None


def test_the_delivery_event_reaches_the_link_attributes_without_a_wrapper(pair: Pair) -> None:
    pair.receiver.enmesh_in = "the router's InLink"
    pair.send("t", b"x")
    found = []
    while (event := rawproton.collector_peek(pair.collector._impl)) != rawproton.NULL:
        if rawproton.event_type(event) == rawproton.PN_DELIVERY:
            link = rawproton.delivery_link(rawproton.event_delivery(event))
            attrs = rawproton.link_attrs(link)
            assert attrs is not None
            found.append(attrs.get("enmesh_in"))
        rawproton.collector_pop(pair.collector._impl)
    assert found == ["the router's InLink"]


def test_plain_outcomes_and_remote_state(pair: Pair) -> None:
    sent = pair.send("a", b"x")
    arrived = rawproton.current(pair.receiver)
    assert arrived is not None
    pair.accept(arrived)
    assert rawproton.remote_state(sent) == Disposition.ACCEPTED
    assert isinstance(rawproton.remote_state(sent), int)
    assert sent.settled


def test_dispositions_with_fields_are_made_when_asked(pair: Pair) -> None:
    """`local` and `remote` exist only once read, and work as proton's own."""
    sent = pair.send("m", b"x")
    arrived = rawproton.current(pair.receiver)
    assert arrived is not None
    assert "local" not in arrived.__dict__["_attrs"]
    pair.receiver.recv(arrived.pending)
    pair.receiver.advance()
    arrived.local.failed = True
    arrived.local.undeliverable = True
    arrived.update(Disposition.MODIFIED)
    arrived.settle()
    pair.pump()
    assert rawproton.remote_state(sent) == Disposition.MODIFIED
    assert sent.remote.failed and sent.remote.undeliverable


def test_attributes_stay_on_the_lean_wrapper_and_it_keeps_the_delivery_alive(
    pair: Pair,
) -> None:
    sent = pair.send("kept", b"x")
    sent.note = "mine"
    assert sent.note == "mine"
    with pytest.raises(AttributeError):
        _ = sent.unknown
    proton_wrapper = rawproton.current(pair.sender)  # none current after advance
    assert proton_wrapper is None
    # Settled on both sides, proton lets the delivery go; our reference keeps it readable.
    arrived = rawproton.current(pair.receiver)
    assert arrived is not None
    pair.accept(arrived)
    sent.settle()
    pair.pump()
    del arrived
    gc.collect()
    assert sent.tag == "kept"
    assert rawproton.remote_state(sent) == Disposition.ACCEPTED


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_send_and_receive_carry_the_bytes_as_proton_does(pair: Pair, kind: type) -> None:
    """The router sends bytes, a bytearray (a reassembled message) or a memoryview."""
    body = bytes(range(256)) * 3
    delivery = rawproton.new_delivery(pair.sender, b"raw")
    rawproton.send(pair.sender._impl, kind(body))
    rawproton.link_advance(pair.sender._impl)
    pair.pump()
    arrived = rawproton.current(pair.receiver)
    assert arrived is not None and not arrived.partial
    link = pair.receiver._impl
    assert rawproton.receive(link, 100) == body[:100]
    assert rawproton.receive(link, 10_000) == body[100:]
    assert rawproton.receive(link, 100) == b""  # its end: no bytes, not proton's buffer
    assert delivery.tag == "raw"


def test_send_without_a_current_delivery_is_refused(pair: Pair) -> None:
    with pytest.raises(LinkException):
        rawproton.send(pair.sender._impl, b"no delivery")


def _move(source: Transport, sink: Transport) -> int:
    """What the router's socket does with proton's output and its peer's input, raw."""
    pending = rawproton.transport_pending(source._impl)
    if pending <= 0:
        return 0
    out = rawproton.transport_output(source._impl, pending)
    assert bytes(out) == source.peek(pending)  # the same bytes proton-python's peek gives
    assert rawproton.transport_push(sink._impl, bytes(out))
    rawproton.transport_pop(source._impl, pending)
    return pending


def test_transport_io_carries_a_message_as_proton_does(pair: Pair) -> None:
    pair.sender.delivery(b"t")
    pair.sender.send(b"through raw transport calls")
    pair.sender.advance()
    assert _move(pair.client_transport, pair.server_transport) > 0
    arrived = pair.receiver.current
    assert arrived is not None and not arrived.partial
    assert pair.receiver.recv(arrived.pending) == b"through raw transport calls"
    assert rawproton.transport_pending(pair.client_transport._impl) == 0
    assert rawproton.transport_output(pair.client_transport._impl, 0) == b""


def test_a_closed_input_takes_no_more(pair: Pair) -> None:
    transport = pair.server_transport
    assert rawproton.transport_capacity(transport._impl) == transport.capacity() > 0
    transport.close_tail()
    assert rawproton.transport_capacity(transport._impl) < 0
    assert not rawproton.transport_push(transport._impl, b"\x00\x00\x00\x08")


def test_tick_gives_proton_pythons_deadline_in_seconds() -> None:
    client, server = Transport(), Transport(Transport.SERVER)
    client.idle_timeout = 4.0  # the peer must be heard from: a deadline exists
    client_connection, server_connection = Connection(), Connection()
    client.bind(client_connection)
    server.bind(server_connection)
    client_connection.open()
    server_connection.open()
    while _move(client, server) + _move(server, client):
        pass
    raw = rawproton.transport_tick(client._impl, 100.0)
    assert raw == client.tick(100.0)
    assert 100.0 < raw <= 104.0
