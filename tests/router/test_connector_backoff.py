"""A connector's retries back off while its peer fails, even a peer that answers the open
and closes at once (RabbitMQ does that while the connection's vhost is down: a router that
took the answered open for success dialled it ten times a second), and dial again at once
when a connection that worked ends."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from tests.support.amqp import Account
from tests.support.mesh import Mesh
from tests.support.peer_process import PeerProcess
from tests.support.qdmanage import Qdmanage, administered_router

REFUSALS = 4  # retried after 0.1, 0.2, 0.4 and 0.8 s: 1.5 s in all; the next delay 1.6 s
HOLD_SECONDS = 6.0  # longer than the longest backoff (5 s): a connection that worked


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Mesh, Account]]:
    with administered_router(tmp_path_factory.mktemp("backoff")) as running:
        yield running


def test_a_peer_that_closes_after_its_open_is_retried_with_backoff_and_a_lasting_one_at_once(
    router: tuple[Mesh, Account],
) -> None:
    _, admin = router
    peer = PeerProcess("--refuse", str(REFUSALS), "--hold", str(HOLD_SECONDS))
    try:
        peer.expect("listening")
        connector = {"role": "route-container", "host": "127.0.0.1", "port": str(peer.port)}
        with Qdmanage(admin) as client:
            assert client.create(connector, type="connector", name="flapping").status == 201
        attempts = [peer.expect("refused") for _ in range(REFUSALS)] + [peer.expect("open")]
        gaps = [round(later - earlier, 2) for earlier, later in itertools.pairwise(attempts)]
        print(f"seconds between the connector's attempts: {gaps}")
        assert attempts[-1] - attempts[0] >= 1.2, (
            f"{REFUSALS} refusals and the open took {attempts[-1] - attempts[0]:.2f} s "
            f"(gaps {gaps}); with backoff they take 1.5 s"
        )
        closed = peer.expect("closed", timeout=HOLD_SECONDS + 10)
        reopened = peer.expect("open")
        print(
            f"a connection that lasted {HOLD_SECONDS} s: dialled again after "
            f"{reopened - closed:.2f} s"
        )
        assert reopened - closed < 1.2, (
            f"the connector waited {reopened - closed:.2f} s after a connection that lasted "
            f"{HOLD_SECONDS} s (its backoff was not reset: 1.6 s)"
        )
        with Qdmanage(admin) as client:
            assert client.delete(type="connector", name="flapping").status == 204
    finally:
        peer.stop()
