"""A bug in one socket's handler ends that socket's connection, not the event loop."""

from __future__ import annotations

import selectors
import socket

from enmesh.router.loop import Loop


class Faulty:
    """Raises on its first read; counts how it was ended."""

    def __init__(self, sock: socket.socket, loop: Loop) -> None:
        self.sock, self.loop = sock, loop
        self.dropped = 0

    def on_readable(self) -> None:
        raise KeyError("a bug")

    def on_writable(self) -> None:
        pass

    def drop_after_bug(self) -> None:
        self.dropped += 1
        self.loop.unregister(self.sock)


class Healthy:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.got = b""

    def on_readable(self) -> None:
        self.got += self.sock.recv(100)

    def on_writable(self) -> None:
        pass


def test_a_failing_handler_is_dropped_and_the_others_are_still_served() -> None:
    loop = Loop()
    bad_ours, bad_peer = socket.socketpair()
    good_ours, good_peer = socket.socketpair()
    try:
        for sock in (bad_ours, good_ours):
            sock.setblocking(False)
        faulty, healthy = Faulty(bad_ours, loop), Healthy(good_ours)
        loop.register(bad_ours, faulty, selectors.EVENT_READ)
        loop.register(good_ours, healthy, selectors.EVENT_READ)
        bad_peer.send(b"x")
        good_peer.send(b"hello")
        assert loop.run_until(lambda: healthy.got == b"hello", timeout=5)
        assert faulty.dropped == 1
        good_peer.send(b" again")  # the loop goes on serving after the failure
        assert loop.run_until(lambda: healthy.got == b"hello again", timeout=5)
        assert faulty.dropped == 1  # unregistered: not tried again
    finally:
        for sock in (bad_ours, bad_peer, good_ours, good_peer):
            sock.close()
        loop.selector.close()
