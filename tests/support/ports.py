"""Free TCP ports on 127.0.0.1.

A port found free here can be taken by someone else before the caller binds it; callers
that start servers should retry with new ports if binding fails.
"""

from __future__ import annotations

import contextlib
import random
import socket

HOST = "127.0.0.1"
_LOW = 20000
_HIGH = 60000


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # No SO_REUSEADDR: a port in TIME_WAIT is reported as taken, which is what a
        # server that does not set the option would see as well.
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port on 127.0.0.1 the kernel considers free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
    return port


def free_port_block(count: int, stride: int = 1, attempts: int = 500) -> int:
    """A base port such that `base + i * stride` is bindable on 127.0.0.1 for all `i < count`.

    Bases are tried at random in 20000-60000 (away from the usual ephemeral range, which
    starts at 32768 on Linux but is crowded by outgoing connections in the upper part).
    """
    if count < 1 or stride < 1:
        raise ValueError("count and stride must be >= 1")
    span = (count - 1) * stride
    if span > _HIGH - _LOW:
        raise ValueError(f"a block of {count} ports {stride} apart does not fit in {_LOW}-{_HIGH}")
    rng = random.SystemRandom()
    for _ in range(attempts):
        base = rng.randint(_LOW, _HIGH - span)
        if all(_bindable(base + i * stride) for i in range(count)):
            return base
    raise RuntimeError(f"no block of {count} free ports {stride} apart after {attempts} tries")


def port_is_listening(port: int, timeout: float = 0.5) -> bool:
    """True if something accepts TCP connections on 127.0.0.1:port."""
    with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=timeout):
        return True
    return False
