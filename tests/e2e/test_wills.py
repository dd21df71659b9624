"""An AMQP client's will on the running stack: registered on `$lwt`, kept in the router's
will store (the router role's `--will-store`) across a restart of that router, and
published once it is back (its client's connection ended with the old process)."""

from __future__ import annotations

import time
from typing import Any

from proton import Message

from enmesh.deploy.smoke import Stack
from enmesh.deploy.stackctl import reachable_routers
from tests.e2e.test_stack import _connect
from tests.support.mesh import wait_until


def test_a_will_outlives_a_restart_of_its_router(
    host: Any, stack: Stack, deployment: dict[str, Any]
) -> None:
    routers = deployment["routers"]
    will = f"device went away with router 0, {time.time_ns()}"
    device = _connect(stack, stack.urls[0], "device@iot", stack.password("device@iot"), "iot")
    device.create_sender("$lwt").send(Message(address="telemetry", body=will))  # accepted

    first = routers[0]
    restart = host.run(f"supervisorctl restart enmesh-router-{first['id']}")
    assert restart.rc == 0, restart.stderr
    wait_until(
        lambda: reachable_routers(first["host"], first["ports"]["metrics"]) == len(routers) - 1,
        timeout=60,
        what=f"{first['id']} back in the mesh",
        interval=0.2,
    )
    backend = stack.password("backend@iot")
    consumer = _connect(stack, stack.urls[-1], "backend@iot", backend, "iot")
    try:
        receiver = consumer.create_receiver("telemetry")
        message = receiver.receive(timeout=60)
        receiver.accept()
        assert message.body == will
    finally:
        consumer.close()
