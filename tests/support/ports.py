"""Free TCP ports on 127.0.0.1.

A port found free here can be taken by someone else before the caller binds it; callers
that start servers should retry with new ports if binding fails. Ports are drawn from
below the kernel's ephemeral range: inside it, any outgoing connection (the tests open
thousands) can take a port between the check and the server's bind, as one did in CI
(a router's metrics port, 34756).
"""

from __future__ import annotations

import contextlib
import functools
import random
import socket
from pathlib import Path

from enmesh.compile import load_stack
from enmesh.compile.layout import Layout
from enmesh.compile.ports import claims
from enmesh.model import load_model

HOST = "127.0.0.1"
_LOW = 10000
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _below_ephemeral() -> int:
    """The highest port the kernel does not hand out to outgoing connections (Linux's
    default range starts at 32768)."""
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0]) - 1
    except (OSError, ValueError, IndexError):
        return 32767


_HIGH = _below_ephemeral()


LOCAL_STACK = Path(__file__).resolve().parents[2] / "stacks" / "local.stack.yml"


@functools.cache
def local_stack_ports() -> frozenset[int]:
    """Every port the local stack listens on (the compiler's own list): make test runs the
    local-stack scenario while the rest of pytest may still run, so tests never take them."""
    stack, models = load_stack(LOCAL_STACK)
    return frozenset(port for _, port, _ in claims(Layout(stack, load_model(models))))


def _bindable(port: int) -> bool:
    if port in local_stack_ports():
        return False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # No SO_REUSEADDR: a port in TIME_WAIT is reported as taken, which is what a
        # server that does not set the option would see as well.
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port on 127.0.0.1 that is free right now, below the ephemeral range."""
    return free_port_block(1)


def free_port_block(count: int, stride: int = 1, attempts: int = 500) -> int:
    """A base port such that `base + i * stride` is bindable on 127.0.0.1 for all `i < count`.

    Bases are tried at random from 10000 to just below the kernel's ephemeral range.
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


def free_port_blocks(
    kinds: int, count: int, avoid: frozenset[int] = frozenset(), attempts: int = 500
) -> list[int]:
    """`kinds` bases of `count` consecutive bindable ports each, no two blocks sharing a
    port (independent blocks may overlap: nothing is bound between the picks) and none
    holding a port of `avoid`."""
    bases: list[int] = []
    for _ in range(attempts):
        base = free_port_block(count)
        block = range(base, base + count)
        if all(abs(base - other) >= count for other in bases) and not avoid & set(block):
            bases.append(base)
            if len(bases) == kinds:
                return bases
    raise RuntimeError(f"no {kinds} disjoint blocks of {count} free ports after {attempts} tries")


def port_is_listening(port: int, timeout: float = 0.5) -> bool:
    """True if something accepts TCP connections on 127.0.0.1:port."""
    with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=timeout):
        return True
    return False
