"""Checks of the strings a peer sends in open and attach frames, before anything uses them.

proton decodes a frame's strings only when they are read, so invalid UTF-8 surfaces as a
UnicodeDecodeError wherever a field is first touched: in a handler, or later in
management or /metrics, far from the connection that sent it. Reading each field once
when the frame arrives turns that into a clean close of that connection
(`amqp:decode-error`) that names the field.
"""

from __future__ import annotations

from collections.abc import Callable

from proton import Connection, Link


def _first_bad(fields: dict[str, Callable[[], object]]) -> str | None:
    for name, read in fields.items():
        try:
            read()
        except UnicodeDecodeError:
            return name
    return None


def open_problem(connection: Connection) -> str | None:
    """What is wrong with a peer's open frame, or None."""
    bad = _first_bad(
        {
            "container-id": lambda: connection.remote_container,
            "hostname": lambda: connection.remote_hostname,
        }
    )
    return f"invalid UTF-8 in the open frame's {bad}" if bad else None


def attach_problem(link: Link) -> str | None:
    """What is wrong with a peer's attach frame, or None."""
    bad = _first_bad(
        {
            "name": lambda: link.name,
            "source address": lambda: link.remote_source.address,
            "target address": lambda: link.remote_target.address,
        }
    )
    return f"invalid UTF-8 in the attach frame's {bad}" if bad else None
