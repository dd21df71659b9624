"""The router's message annotations, as qdrouterd 1.19 writes and reads them.

qdrouterd (src/message.c compose_router_message_annotations, src/parse.c
qd_parse_annotations, src/router_node.c) keeps its own entries in the message-annotations
map, after the user's: `x-opt-qd.to` (route to this address), `x-opt-qd.phase`,
`x-opt-qd.stream`, `x-opt-qd.ingress` (the router the message entered the mesh at, as
`0/<router id>`) and `x-opt-qd.trace` (the list of routers it passed, each `0/<id>`).

- In: on a connection that strips incoming annotations (`stripAnnotations: in | both`,
  the default) the router's entries a client sent are ignored, unchecked; otherwise they
  are checked (`to` and `ingress` strings, `trace` a list of strings) and a bad one gets
  the message rejected with `amqp:invalid-field` and qdrouterd's description. Inter-router
  links never strip.
- Out: to a client whose connection strips outgoing annotations (`out | both`) only the
  user's entries go; otherwise, and always to the next router, the router's entries follow
  them, with this router as ingress (unless one came in) and appended to the trace.
- The user's entries are those before the first router entry: qdrouterd expects its own
  entries last and drops what follows them.

Only the message-annotations section's bytes change: the bytes before it (header,
delivery annotations) and after it (properties, application properties, body) are copied
unchanged, never decoded. A message without router entries going to a stripping client
is sent as it came.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass

from enmesh.router import sections
from enmesh.router.config_model import StripAnnotations
from enmesh.router.sections import MalformedMessageError

AREA = "0"  # qdrouterd's node ids are `<area>/<router id>`; the area is always 0
TO, PHASE, STREAM = b"x-opt-qd.to", b"x-opt-qd.phase", b"x-opt-qd.stream"
INGRESS, TRACE = b"x-opt-qd.ingress", b"x-opt-qd.trace"
# Keys qdrouterd treats as its own: the ones above, a bare prefix and the retired class.
_ROUTER_KEYS = frozenset((TO, PHASE, STREAM, INGRESS, TRACE, b"x-opt-qd.", b"x-opt-qd.class"))
_STR, _SYM = (0xA1, 0xB1), (0xA3, 0xB3)
_LISTS = (0x45, 0xC0, 0xD0)
_MA_DESCRIPTOR = b"\x00\x53\x72"


class AnnotationError(ValueError):
    """A router annotation qdrouterd would refuse; the text is qdrouterd's."""


@dataclass(slots=True)
class Annotations:
    """Where a message's annotations are, and the router entries it brought."""

    start: int  # the message-annotations section's first byte (or where it would go)
    end: int  # just after it (== start when the message has none)
    user: bytes = b""  # the user's key/value pairs, encoded
    user_count: int = 0  # elements (keys and values) in `user`
    clean: bool = True  # the section is exactly the user's entries: nothing to strip
    passed: bytes = b""  # encoded to / phase / stream entries kept from the sender
    passed_count: int = 0
    ingress: bytes | None = None  # the incoming ingress router id (utf-8)
    trace: bytes = b""  # the incoming trace list's elements, encoded
    trace_count: int = 0


def strips_in(setting: StripAnnotations) -> bool:
    return setting in (StripAnnotations.IN, StripAnnotations.BOTH)


def strips_out(setting: StripAnnotations) -> bool:
    return setting in (StripAnnotations.OUT, StripAnnotations.BOTH)


@functools.lru_cache(maxsize=16)
def node_id(router_id: str) -> bytes:
    """This router's id as qdrouterd writes it in ingress and trace: an encoded string."""
    return _string(f"{AREA}/{router_id}".encode())


def inbound(data: bytes, *, strip: bool) -> Annotations:
    """Find the annotations of a received message; check router entries unless `strip`.

    Raises AnnotationError for what qdrouterd rejects, MalformedMessageError for bytes
    that are not an AMQP message up to its annotations.
    """
    try:
        return _inbound(memoryview(data), strip)
    except (IndexError, struct.error) as exc:
        raise MalformedMessageError(f"truncated or invalid message encoding: {exc}") from None


def outgoing(data: bytes, found: Annotations | None, trace_as: bytes | None) -> bytes:
    """The bytes to send: user entries only (`trace_as` None), or with the router's.

    `found` None means nobody looked (link routes, broker links): such a message goes to a
    client as it came, and to the next router with its router entries stripped.
    """
    if found is None:
        if trace_as is None:
            return data
        try:
            found = inbound(data, strip=True)
        except (AnnotationError, MalformedMessageError):
            return data  # not ours to judge: the next router checks it as any other
    if trace_as is None:
        if found.clean:
            return data
        section = _section(found.user, found.user_count) if found.user_count else b""
    else:
        section = _section(*_router_entries(found, trace_as))
    return b"".join((data[: found.start], section, data[found.end :]))


def _router_entries(found: Annotations, trace_as: bytes) -> tuple[bytes, int]:
    ingress = _string(found.ingress) if found.ingress is not None else trace_as
    trace = _list(found.trace + trace_as, found.trace_count + 1)
    body = b"".join((found.user, found.passed, _symbol(INGRESS), ingress, _symbol(TRACE), trace))
    return body, found.user_count + found.passed_count + 4


def _inbound(data: memoryview, strip: bool) -> Annotations:
    position = 0
    while position < len(data):
        if data[position] != 0x00:
            raise MalformedMessageError(f"expected a section at byte {position}")
        code, value_at = sections.descriptor(data, position + 1)
        if code in (sections.HEADER, sections.DELIVERY_ANNOTATIONS):
            position = sections.skip(data, value_at)
            continue
        if code != sections.MESSAGE_ANNOTATIONS:
            break
        end = sections.skip(data, value_at)
        found = Annotations(position, end)
        _read_map(data, value_at, found, strip)
        return found
    return Annotations(position, position)


def _read_map(data: memoryview, position: int, found: Annotations, strip: bool) -> None:
    if data[position] not in (0xC1, 0xD1):
        raise AnnotationError("Invalid message annotations section - missing map type")
    count, position = sections.compound(data, position)
    if count & 1:
        raise AnnotationError("Invalid MA map count (odd number of fields)")
    user_start = user_end = position
    for _ in range(count // 2):
        key_at = position
        value_at = sections.skip(data, key_at)
        position = sections.skip(data, value_at)
        key = _key(data, key_at)
        if key not in _ROUTER_KEYS:
            if found.clean:
                user_end = position
                found.user_count += 2
            continue  # after a router entry: dropped, as qdrouterd does
        found.clean = False
        if not strip:
            _router_entry(data, found, key=key, span=(key_at, value_at, position))
    found.user = bytes(data[user_start:user_end])


def _router_entry(
    data: memoryview, found: Annotations, *, key: bytes, span: tuple[int, int, int]
) -> None:
    """Check one router entry and keep it; `span`: where its key, its value and it end."""
    key_at, value_at, end = span
    code = data[value_at]
    if key == TO:
        if code not in _STR:
            raise AnnotationError("to-override not a valid string type")
    elif key == INGRESS:
        if code not in _STR:
            raise AnnotationError("ingress router not a string type")
        start, stop = sections.extent(data, value_at)
        found.ingress = bytes(data[start:stop])
        return
    elif key == TRACE:
        if code not in _LISTS:
            raise AnnotationError("trace annotation is not a list")
        found.trace_count, first = sections.compound(data, value_at)
        element = first
        for _ in range(found.trace_count):
            if data[element] not in _STR:
                raise AnnotationError("trace list contains non-string entries")
            element = sections.skip(data, element)
        found.trace = bytes(data[first:element])
        return
    elif key not in (PHASE, STREAM):
        return  # the bare prefix and the retired class are dropped
    found.passed += bytes(data[key_at:end])
    found.passed_count += 2


def _key(data: memoryview, position: int) -> bytes | None:
    if data[position] not in _SYM:
        return None
    start, end = sections.extent(data, position)
    if not data[start:end].tobytes().startswith(b"x-opt-qd."):
        return None
    return bytes(data[start:end])


def _section(entries: bytes, count: int) -> bytes:
    if len(entries) + 1 <= 0xFF and count <= 0xFF:
        header = struct.pack(">BBB", 0xC1, len(entries) + 1, count)
    else:
        header = struct.pack(">BII", 0xD1, len(entries) + 4, count)
    return _MA_DESCRIPTOR + header + entries


def _list(elements: bytes, count: int) -> bytes:
    if len(elements) + 1 <= 0xFF and count <= 0xFF:
        return struct.pack(">BBB", 0xC0, len(elements) + 1, count) + elements
    return struct.pack(">BII", 0xD0, len(elements) + 4, count) + elements


def _string(value: bytes) -> bytes:
    if len(value) <= 0xFF:
        return struct.pack(">BB", 0xA1, len(value)) + value
    return struct.pack(">BI", 0xB1, len(value)) + value


def _symbol(value: bytes) -> bytes:
    return struct.pack(">BB", 0xA3, len(value)) + value
