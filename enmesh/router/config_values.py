"""Attribute values of a router config: text as written -> typed values.

A converter raises ValueError for a value of the wrong form, `UnsupportedError` for a value
that qdrouterd accepts but enmesh-router does not implement, and `IgnoredError` for a value
that is accepted without effect (the loader turns it into one warning line).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any

Raw = str | dict[str, Any]  # a value as written: text, or a JSON object
Convert = Callable[[Raw], Any]


class UnsupportedError(Exception):
    """A value qdrouterd accepts that enmesh-router does not implement; says why."""


class IgnoredError(Exception):
    """A value accepted without effect; says why nothing a client sees changes."""


def text(value: Raw) -> str:
    if not isinstance(value, str):
        raise ValueError("expected text, got a JSON object")
    return value


_BOOLEANS = {"true": True, "yes": True, "on": True, "false": False, "no": False, "off": False}


def boolean(value: Raw) -> bool:
    """qdrouterd's booleans: true/yes/on, false/no/off, in any case."""
    written = text(value)
    found = _BOOLEANS.get(written.lower())
    if found is None:
        raise ValueError(f"expected true or false, got {written!r}")
    return found


def integer(low: int, high: int | None = None) -> Convert:
    expected = f"an integer {low}-{high}" if high is not None else f"an integer >= {low}"

    def convert(value: Raw) -> int:
        written = text(value)
        number = int(written) if re.fullmatch(r"-?[0-9]+", written) else None
        if number is None or number < low or (high is not None and number > high):
            raise ValueError(f"expected {expected}, got {written!r}")
        return number

    return convert


# qdrouterd's `port` is a service name or number; these are the names AMQP uses.
_SERVICES = {"amqp": 5672, "amqps": 5671}
_port_number = integer(1, 65535)


def port(value: Raw) -> int:
    written = text(value)
    return _SERVICES[written] if written in _SERVICES else _port_number(written)


def choice(kind: type[StrEnum], refused: Mapping[str, str] | None = None) -> Convert:
    """One of `kind`'s values; values in `refused` are recognised but not supported."""
    refused = refused or {}
    allowed = [member.value for member in kind]

    def convert(value: Raw) -> StrEnum:
        written = text(value)
        if written in refused:
            raise UnsupportedError(refused[written])
        try:
            return kind(written)
        except ValueError:
            expected = ", ".join(allowed)
            raise ValueError(f"expected one of {expected}, got {written!r}") from None

    return convert


def one_of(*values: str) -> Convert:
    """Text that must be one of `values` (qdrouterd enums enmesh only records)."""

    def convert(value: Raw) -> str:
        written = text(value)
        if written not in values:
            raise ValueError(f"expected one of {', '.join(values)}, got {written!r}")
        return written

    return convert


def words(value: Raw) -> tuple[str, ...]:
    return tuple(text(value).split())


def path(value: Raw) -> Path:
    return Path(text(value))


def json_object(value: Raw) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object, got {value!r}")
    return value


def camel_case(name: str) -> str:
    """`link-capacity` -> `linkCapacity`: qdrouterd reads names with ' ', '_', '.', '-'."""
    first, *rest = re.split(r"[ _.-]+", name)
    return first + "".join(word.capitalize() for word in rest)
