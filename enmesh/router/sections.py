"""Read one field out of an encoded AMQP 1.0 message without decoding the message.

The router forwards message bytes untouched; an anonymous-relay message is the one case
where it must look inside, for its address. This walks the sections in order (header,
delivery-annotations, message-annotations, properties), skipping values by their
encoded sizes, and stops at the properties section: the application properties and the
body, where almost all of a message's bytes are, are never visited.

Every AMQP type code says how to skip its value: the high nibble is the width class
(0x4_: no bytes, 0x5_: 1, 0x6_: 2, 0x7_: 4, 0x8_: 8, 0x9_: 16; 0xa_/0xc_/0xe_: a one-byte
size then that many bytes; 0xb_/0xd_/0xf_: a four-byte size), and 0x00 starts a
described value (a descriptor, then the value).
"""

from __future__ import annotations

import struct

TO_OVERRIDE = b"x-opt-qd.to"  # qdrouterd's message annotation: route to this address

_HEADER, _DELIVERY_ANNOTATIONS, _MESSAGE_ANNOTATIONS, _PROPERTIES = 0x70, 0x71, 0x72, 0x73
_SYMBOLIC = {
    b"amqp:header:list": _HEADER,
    b"amqp:delivery-annotations:map": _DELIVERY_ANNOTATIONS,
    b"amqp:message-annotations:map": _MESSAGE_ANNOTATIONS,
    b"amqp:properties:list": _PROPERTIES,
}
_FIXED = {0x4: 0, 0x5: 1, 0x6: 2, 0x7: 4, 0x8: 8, 0x9: 16}
_ONE_BYTE_SIZE, _FOUR_BYTE_SIZE = (0xA, 0xC, 0xE), (0xB, 0xD, 0xF)
_STRINGS = (0xA1, 0xB1, 0xA3, 0xB3)  # str8, str32, sym8, sym32
_TO_FIELD = 2  # properties: message-id, user-id, to, ...


class MalformedMessageError(ValueError):
    """The bytes are not an AMQP message as far as the router needs to read them."""


class TruncatedError(MalformedMessageError):
    """A value runs past the bytes there are: malformed if complete, else more to come."""


def head_complete(data: bytes) -> bool:
    """Does a message prefix hold every section routing reads (header to properties)?

    False when more bytes are needed; raises MalformedMessageError on bad encoding.
    """
    view = memoryview(data)
    position = 0
    try:
        while position < len(view):
            if view[position] != 0x00:
                raise MalformedMessageError(f"expected a section at byte {position}")
            section, position = _descriptor(view, position + 1)
            if section > _PROPERTIES:
                return True
            position = skip(view, position)
            if position > len(view):
                return False
            if section == _PROPERTIES:
                return True
    except (TruncatedError, IndexError, struct.error):
        return False
    return False


def message_address(data: bytes, *, honour_annotation: bool) -> str | None:
    """The address a message names: `x-opt-qd.to` (when honoured), else properties `to`.

    Returns None when neither is there; raises MalformedMessageError on bad encoding.
    """
    try:
        return _scan(memoryview(data), honour_annotation)
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise MalformedMessageError(f"truncated or invalid message encoding: {exc}") from None


def _scan(data: memoryview, honour_annotation: bool) -> str | None:
    position = 0
    while position < len(data):
        if data[position] != 0x00:
            raise MalformedMessageError(f"expected a section at byte {position}")
        section, position = _descriptor(data, position + 1)
        if section > _PROPERTIES:
            return None  # application properties or body: no `to` any more
        if section == _MESSAGE_ANNOTATIONS and honour_annotation:
            found = _annotation(data, position)
            if found is not None:
                return found
        if section == _PROPERTIES:
            return _to_field(data, position)
        position = skip(data, position)
    return None


def _descriptor(data: memoryview, position: int) -> tuple[int, int]:
    """A section's descriptor as its numeric code, and where its value starts."""
    code = data[position]
    if code == 0x53:  # smallulong
        return data[position + 1], position + 2
    if code == 0x80:  # ulong
        return struct.unpack_from(">Q", data, position + 1)[0], position + 9
    if code in (0xA3, 0xB3):
        start, end = _extent(data, position)
        return _SYMBOLIC.get(bytes(data[start:end]), 0xFF), end
    raise MalformedMessageError(f"unexpected section descriptor type 0x{code:02x}")


def skip(data: memoryview, position: int) -> int:
    """The position just after the encoded value starting at `position`."""
    code = data[position]
    if code == 0x00:
        return skip(data, skip(data, position + 1))
    width = _FIXED.get(code >> 4)
    if width is not None:
        return position + 1 + width
    return _extent(data, position)[1]


def _extent(data: memoryview, position: int) -> tuple[int, int]:
    """Where a variable-width value's bytes start and end (after its size field)."""
    nibble = data[position] >> 4
    if nibble in _ONE_BYTE_SIZE:
        start = position + 2
        end = start + data[position + 1]
    elif nibble in _FOUR_BYTE_SIZE:
        start = position + 5
        end = start + struct.unpack_from(">I", data, position + 1)[0]
    else:
        raise MalformedMessageError(f"unknown type code 0x{data[position]:02x} at byte {position}")
    if end > len(data):
        raise TruncatedError(f"value at byte {position} runs past the end of the message")
    return start, end


def _compound(data: memoryview, position: int) -> tuple[int, int]:
    """A list's or map's element count and where its first element starts."""
    code = data[position]
    if code == 0x45:  # list0
        return 0, position + 1
    if code in (0xC0, 0xC1):
        return data[position + 2], position + 3
    if code in (0xD0, 0xD1):
        return struct.unpack_from(">I", data, position + 5)[0], position + 9
    raise MalformedMessageError(f"expected a list or map at byte {position}, got 0x{code:02x}")


def _string(data: memoryview, position: int) -> str | None:
    code = data[position]
    if code == 0x40:  # null
        return None
    if code not in _STRINGS:
        raise MalformedMessageError(f"expected an address string at byte {position}")
    start, end = _extent(data, position)
    return bytes(data[start:end]).decode()


def _annotation(data: memoryview, position: int) -> str | None:
    count, position = _compound(data, position)
    for _ in range(count // 2):
        key_at, position = position, skip(data, position)
        if data[key_at] in (0xA3, 0xB3):
            start, end = _extent(data, key_at)
            if data[start:end] == TO_OVERRIDE:
                return _string(data, position)
        position = skip(data, position)
    return None


def _to_field(data: memoryview, position: int) -> str | None:
    count, position = _compound(data, position)
    if count <= _TO_FIELD:
        return None
    for _ in range(_TO_FIELD):
        position = skip(data, position)
    return _string(data, position)


# Shared with enmesh.router.annotations, which edits the message-annotations section.
descriptor, extent, compound = _descriptor, _extent, _compound
HEADER, DELIVERY_ANNOTATIONS, MESSAGE_ANNOTATIONS, PROPERTIES = (
    _HEADER,
    _DELIVERY_ANNOTATIONS,
    _MESSAGE_ANNOTATIONS,
    _PROPERTIES,
)
