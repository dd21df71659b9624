"""Live apply on Kubernetes, router side: the config directory is a projected Secret volume
and the Secret is updated in place. kubelet swaps the volume's `..data` symlink; a router
run with `--watch-config` notices the new contents and reloads them as SIGHUP would, so a
new address and new rights are usable on a connection opened before the swap, in the
same process."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from proton import Message
from proton.reactor import AtMostOnce
from proton.utils import BlockingConnection

from enmesh.compile import compile_model, load_stack
from enmesh.control.routers import installed_digests
from enmesh.model import load_model
from tests.router.conftest import account, sender_refusal
from tests.support import kubelet
from tests.support.mesh import Mesh, RouterProcess, build_mesh, wait_until

HOT = """
---
apiVersion: enmesh.io/v1
kind: Address
metadata: {name: iot.hot}
spec: {addressSpace: iot, address: hot, type: anycast, plan: standard-anycast}
"""
# backend@iot's rights, before and after: it may also send to and receive from `hot`.
RIGHTS = {
    "addresses: [telemetry, events, readings, alerts, audit, dlq]": (
        "addresses: [telemetry, events, readings, alerts, audit, dlq, hot]"
    ),
    "addresses: [commands, broadcast, alerts]": "addresses: [commands, broadcast, alerts, hot]",
}


@pytest.fixture
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    built = build_mesh(tmp_path_factory.mktemp("watch"), routers=1)
    kubelet.replace_with_projection(built.directory / "config")
    built.routers[0].options = ("--watch-config", "0.2")
    try:
        built.start()
        yield built
    finally:
        built.stop()


def _reloads(router: RouterProcess, result: str) -> int:
    found = re.search(
        rf'config_reloads_total{{[^}}]*result="{result}"[^}}]*}} (\S+)', router.metrics()
    )
    return int(float(found[1])) if found else 0


def _flush(connection: BlockingConnection) -> None:
    transport = connection.conn.transport
    connection.wait(lambda: transport.pending() == 0, msg="writing what is queued")


def _recompiled(mesh: Mesh) -> dict[str, str]:
    model = mesh.directory / "iot.model.yml"
    text = model.read_text()
    for before, after in RIGHTS.items():
        assert text.count(before) == 1
        text = text.replace(before, after)
    model.write_text(text + HOT)
    stack, files = load_stack(mesh.directory / "test.stack.yml")
    return compile_model(stack, load_model(files)).files


def test_a_swapped_secret_volume_is_reloaded_without_dropping_a_connection(mesh: Mesh) -> None:
    router = mesh.routers[0]
    assert router.process is not None
    pid = router.process.pid
    config_dir = mesh.directory / "config"
    assert (config_dir / "..data").is_symlink() and (config_dir / "routers").is_symlink()
    refusal = sender_refusal(mesh, "backend@iot", "hot")
    assert refusal is not None and "no address 'hot'" in refusal  # not there yet

    backend = account(mesh, 0, "backend@iot").blocking()  # both open across the swap
    device = account(mesh, 0, "device@iot").blocking()
    try:
        telemetry_in = backend.create_receiver("telemetry", credit=10)
        _flush(backend)  # its credit reaches the router, which gives the sender some
        telemetry_out = device.create_sender("telemetry", options=AtMostOnce())
        # presettled: a blocking send would wait for a settlement only a receive() gives
        telemetry_out.send(Message(body="before"))
        _flush(device)
        assert telemetry_in.receive(timeout=10).body == "before"

        kubelet.update(config_dir, _recompiled(mesh))
        wait_until(lambda: _reloads(router, "ok") == 1, 15, "the router to reload the swap")

        # a connection opened before the swap: its new rights, the new address
        hot_in = backend.create_receiver("hot", credit=10)
        hot_out = backend.create_sender("hot", options=AtMostOnce())
        hot_out.send(Message(body="after"))
        _flush(backend)
        assert hot_in.receive(timeout=10).body == "after"
        telemetry_out.send(Message(body="still"))  # links from before the swap still work
        _flush(device)
        assert telemetry_in.receive(timeout=10).body == "still"
    finally:
        backend.close()
        device.close()
    wanted = installed_digests(
        config_dir / "routers" / "test-router-0.conf", config_dir / "auth" / "policies"
    )
    assert f'sha256="{wanted.config}",policy_sha256="{wanted.policies}"' in router.metrics()
    assert _reloads(router, "ok") == 1 and _reloads(router, "failed") == 0  # once, not again
    assert router.process.poll() is None and router.process.pid == pid
