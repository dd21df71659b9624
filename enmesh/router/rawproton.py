"""proton's C calls for the per-message path (and a session's end), without proton-python's
wrapper objects.

proton-python builds a wrapper (a Python object, reference counting, a lookup of its
attribute record) each time a C object crosses into Python: an Event, its Delivery, that
delivery's Link, Session, Connection and Transport. A message through the router crossed
about fourteen of them, most of its CPU (docs/router.md, "CPU per message"). Here the
router's hot path handles proton's C pointers (cffi `cdata`) itself and reaches its own
objects through the attribute record proton-python keeps on each link (the dict behind
`link.enmesh_in`).

A pointer is only used while proton's event is being dispatched or while a wrapper holds
the object, so nothing here outlives the C object it points to.
"""

from __future__ import annotations

from typing import Any

from cproton_ffi import ffi as _ffi
from cproton_ffi import lib as _lib
from proton import Delivery, Disposition, Link, LinkException, Sender, Session

NULL = _ffi.NULL
PN_DELIVERY = _lib.PN_DELIVERY
PN_TRANSPORT = _lib.PN_TRANSPORT
PN_LINK_FLOW = _lib.PN_LINK_FLOW

collector_peek = _lib.pn_collector_peek
collector_pop = _lib.pn_collector_pop
event_type = _lib.pn_event_type
event_delivery = _lib.pn_event_delivery
event_link = _lib.pn_event_link
delivery_link = _lib.pn_delivery_link
delivery_updated = _lib.pn_delivery_updated
delivery_partial = _lib.pn_delivery_partial
delivery_readable = _lib.pn_delivery_readable
delivery_pending = _lib.pn_delivery_pending
delivery_settled = _lib.pn_delivery_settled
delivery_settle = _lib.pn_delivery_settle
delivery_aborted = _lib.pn_delivery_aborted
link_is_receiver = _lib.pn_link_is_receiver
link_advance = _lib.pn_link_advance
link_credit = _lib.pn_link_credit
link_queued = _lib.pn_link_queued
_link_recv = _lib.pn_link_recv
_link_send = _lib.pn_link_send
_new_buffer = _ffi.new
_link_state = _lib.pn_link_state
_link_unsettled = _lib.pn_link_unsettled
link_flow = _lib.pn_link_flow
link_drain = _lib.pn_link_get_drain
_LOCAL_CLOSED = _lib.PN_LOCAL_CLOSED
_link_attachments = _lib.pn_link_attachments
_record_get_py = _lib.pn_record_get_py
_delivery_tag = _lib.pn_delivery_tag
_from_handle = _ffi.from_handle
_unpack = _ffi.unpack
_from_buffer = _ffi.from_buffer
_new_delivery = _lib.pn_delivery
_incref = _lib.pn_incref
_link_current = _lib.pn_link_current
_delivery_local = _lib.pn_delivery_local
_delivery_remote = _lib.pn_delivery_remote
_delivery_remote_state = _lib.pn_delivery_remote_state
_delivery_local_state = _lib.pn_delivery_local_state
_delivery_update = _lib.pn_delivery_update
# A transport's I/O, each socket wake-up: negative counts are proton's end or error codes.
transport_capacity = _lib.pn_transport_capacity
transport_pending = _lib.pn_transport_pending
transport_pop = _lib.pn_transport_pop
_transport_peek = _lib.pn_transport_peek
_transport_push = _lib.pn_transport_push
_transport_tick = _lib.pn_transport_tick
_buffer = _ffi.buffer
_link_head = _lib.pn_link_head
_link_next = _lib.pn_link_next
_link_session = _lib.pn_link_session
_session_connection = _lib.pn_session_connection


def link_attrs(link: Any) -> dict[str, Any] | None:
    """The attributes the router set on a link's wrapper (`enmesh_in`, `enmesh_out`, ...);
    None for a link no wrapper has seen yet."""
    handle = _record_get_py(_link_attachments(link))
    if handle == NULL:
        return None
    attrs: dict[str, Any] = _from_handle(handle)
    return attrs


def session_links(session: Session) -> list[Link]:
    """The links of one session, at its end. proton lists links per connection only, and
    the MQTT gateway puts a thousand devices' sessions on one: a wrapper for each of the
    connection's links cost about 9 ms per ended session there, comparing pointers 1."""
    target = session._impl
    found: list[Link] = []
    link = _link_head(_session_connection(target), 0)
    while link != NULL:
        if _link_session(link) == target:
            found.append(Link.wrap(link))  # type: ignore[no-untyped-call]
        link = _link_next(link, 0)
    return found


def receive(link: Any, size: int) -> bytes:
    """Up to `size` bytes of the link's current delivery (`Receiver.recv`; its end or an
    error: no bytes). One copy, where cproton's makes three."""
    buffer = _new_buffer("char[]", size)
    read: int = _link_recv(link, buffer, size)
    return _unpack(buffer, read) if read > 0 else b""


def transport_output(transport: Any, size: int) -> Any:
    """Up to `size` bytes of the transport's pending output as a buffer `socket.send`
    takes (`Transport.peek`, in one copy where cproton's makes two); empty at its end."""
    buffer = _new_buffer("char[]", size)
    read: int = _transport_peek(transport, buffer, size)
    return _buffer(buffer, read) if read > 0 else b""


def transport_push(transport: Any, data: bytes) -> bool:
    """Hand proton input (`Transport.push`); False if it took less than all of it (its
    input is closed, or the bytes broke a frame after that)."""
    taken: int = _transport_push(transport, _from_buffer(data), len(data))
    return taken == len(data)


def transport_tick(transport: Any, now: float) -> float:
    """`Transport.tick`: seconds in, the next deadline in seconds out (0.0: none)."""
    deadline: int = _transport_tick(transport, int(now * 1000))
    return deadline / 1000.0


def send(link: Any, data: bytes | bytearray | memoryview) -> None:
    """Bytes of the link's current delivery (`Sender.send`, `stream`); proton copies them."""
    sent: int = _link_send(link, data if type(data) is bytes else _from_buffer(data), len(data))
    if sent < 0:
        raise LinkException(f"[{sent}]: proton took no bytes (no current delivery?)")


def delivery_remote_state(delivery: Any) -> int:
    """The peer's state of a delivery pointer, as an int."""
    state: int = _delivery_remote_state(delivery)
    return state


def top_up(delivery: Delivery, window: int) -> None:
    """Give the delivery's receiving link credit back up to `window`, counting what it
    holds unsettled (nothing if the link is closing)."""
    link = delivery_link(delivery._impl)
    if _link_state(link) & _LOCAL_CLOSED:
        return
    more = window - link_credit(link) - _link_unsettled(link)
    if more > 0:
        link_flow(link, more)


def delivery_tag(delivery: Any) -> bytes:
    """A delivery pointer's tag, as bytes (`Delivery.tag` decodes them)."""
    tag = _delivery_tag(delivery)
    tag_bytes: bytes = _unpack(tag.start, tag.size)
    return tag_bytes


class LeanDelivery(Delivery):
    """A `Delivery` for the router's own messages, made without proton-python's record.

    proton-python keeps a wrapper's attributes in a record on the C object, so that every
    wrapper of it sees them; making one costs a record lookup, a handle, and two
    `Disposition` objects. The router sets no attribute on a delivery and reads its
    dispositions rarely (outcomes with fields), so this one keeps its attributes to itself
    and makes `local`/`remote` when first asked. It holds a reference, as any wrapper does.
    """

    def __init__(self, impl: Any) -> None:
        _incref(impl)
        self.__dict__["_impl"] = impl
        self.__dict__["_attrs"] = {}

    def __getattr__(self, name: str) -> Any:
        attrs = self.__dict__["_attrs"]
        if name not in attrs and name in _DISPOSITIONS:
            local = name == "local"
            impl = self.__dict__["_impl"]
            disposition = _delivery_local(impl) if local else _delivery_remote(impl)
            attrs[name] = Disposition(disposition, local)  # type: ignore[no-untyped-call]
        return super().__getattr__(name)


_DISPOSITIONS = ("local", "remote")


def current(link: Link) -> LeanDelivery | None:
    """The link's current delivery (`Link.current`)."""
    impl = _link_current(link._impl)
    return None if impl == NULL else LeanDelivery(impl)


def new_delivery(sender: Sender, tag: bytes) -> LeanDelivery:
    """A new delivery on `sender` (`Sender.delivery`, which takes the tag as a str)."""
    return LeanDelivery(_new_delivery(sender._impl, (len(tag), _from_buffer(tag))))


def remote_state(delivery: Delivery) -> int:
    """The peer's state as a plain int (`Delivery.remote_state` builds an enum member)."""
    state: int = _delivery_remote_state(delivery._impl)
    return state


def local_state(delivery: Delivery) -> int:
    """The state this side gave, as a plain int (`Delivery.local_state` builds an enum)."""
    state: int = _delivery_local_state(delivery._impl)
    return state


def update(delivery: Delivery, state: int) -> None:
    """Set a local state that has no fields (`Delivery.update` writes the fields first)."""
    _delivery_update(delivery._impl, state)
