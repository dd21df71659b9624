"""`enmesh apply` on a running 3-router mesh + RabbitMQ with 1,000 client connections open.

Measures, for 1 and then for 1,000 new anycast addresses (granted to a user by the same
apply, so no client can use them before): seconds from apply's start to the first
message through the new address (a prober retries attaching from the moment apply
starts), apply's own wall time, and what the 1,000 existing connections saw (closed by the
far end, deliveries released or modified). Targets: < 2 s and < 20 s, 0 dropped.
Results to benchmarks/results/apply_scale.json.

    .venv/bin/python benchmarks/apply_scale.py [--connections 1000] [--addresses 1000]
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from proton import Message
from proton.handlers import MessagingHandler
from proton.reactor import Container

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from enmesh.control.apply import apply_stack  # noqa: E402
from tests.support.amqp import Account  # noqa: E402
from tests.support.apply_target import mesh_target, model_file, stack_file  # noqa: E402
from tests.support.load import Flow, LoadProcess  # noqa: E402
from tests.support.mesh import SAMPLE_MODEL, Mesh  # noqa: E402
from tests.support.stack import brokered_mesh  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "apply_scale.json"
PROBE_TIMEOUT = 120.0
TARGETS = {"one": 2.0, "thousand": 20.0}


def bench_tenant(addresses: list[str]) -> str:
    """Tenant `bench`: a big plan, a user allowed exactly `addresses` (and `seed`)."""
    allowed = ", ".join(["seed", *addresses])
    docs = [
        "apiVersion: enmesh.io/v1\nkind: AddressSpacePlan\nmetadata: {name: bench-big}\nspec:\n"
        "  addressSpaceType: standard\n  resourceLimits: {connections: 5000, addresses: 5000}\n"
        "  addressPlans: [standard-anycast]\n",
        "apiVersion: enmesh.io/v1\nkind: AddressSpace\nmetadata: {name: bench}\n"
        "spec: {type: standard, plan: bench-big}\n",
        "apiVersion: enmesh.io/v1\nkind: MessagingUser\nmetadata: {name: bench.user}\nspec:\n"
        "  addressSpace: bench\n  username: user\n"
        "  authentication:\n    passwordSecret: {name: bench-user, key: password}\n"
        f"  authorization:\n    - operations: [send, recv]\n      addresses: [{allowed}]\n",
    ]
    for name in ["seed", *addresses]:
        docs.append(
            f"apiVersion: enmesh.io/v1\nkind: Address\nmetadata: {{name: bench.{name}}}\n"
            f"spec: {{addressSpace: bench, address: {name}, type: anycast, "
            "plan: standard-anycast}\n"
        )
    return "\n---\n".join(["", *docs])


def _model(addresses: list[str]) -> str:
    sample = SAMPLE_MODEL.read_text().replace("connections: 1000,", "connections: 5000,")
    return sample + bench_tenant(addresses)


def _account(mesh: Mesh, router: int, identity: str) -> Account:
    password = mesh.passwords.get(identity)
    if password is None:
        password = (mesh.secrets_dir / "bench-user" / "password").read_text().strip()
    return Account(mesh.url(router), identity, password, identity.split("@", 1)[1])


class Prober(MessagingHandler):  # type: ignore[misc]
    """Receiver on router 2, then a sender on router 0, one message; a refused attach (the
    address is not granted until the routers reload) starts over 10 ms later."""

    def __init__(self, receiving: Account, sending: Account, address: str) -> None:
        super().__init__()
        self.receiving, self.sending, self.address = receiving, sending, address
        self.arrived: float | None = None
        self.attempts = 0
        self.connections: list[Any] = []
        self.sent = False
        self.give_up: Any = None

    def on_start(self, event: Any) -> None:
        self._attempt(event.container)
        self.give_up = event.container.schedule(PROBE_TIMEOUT, _GiveUp(self))

    def _attempt(self, container: Any) -> None:
        self.attempts += 1
        self.sent = False
        self.connections = [self.receiving.connect(container), self.sending.connect(container)]
        container.create_receiver(self.connections[0], self.address)

    def on_link_opened(self, event: Any) -> None:
        if event.receiver is not None and event.link.remote_source.address == self.address:
            event.container.create_sender(self.connections[1], self.address)

    def on_sendable(self, event: Any) -> None:
        if not self.sent:
            event.sender.send(Message(body="probe"))
            self.sent = True

    def on_message(self, event: Any) -> None:
        self.arrived = time.monotonic()
        self.give_up.cancel()  # else the container runs until the timer fires
        for connection in self.connections:
            connection.close()

    def on_link_error(self, event: Any) -> None:
        for connection in self.connections:
            connection.close()
        event.container.schedule(0.01, self)

    def on_timer_task(self, event: Any) -> None:
        self._attempt(event.container)


class _GiveUp:
    def __init__(self, prober: Prober) -> None:
        self.prober = prober

    def on_timer_task(self, event: Any) -> None:
        if self.prober.arrived is None:
            event.container.stop()


def probe(mesh: Mesh, address: str, started: float) -> float | None:
    """Seconds from `started` until a message sent on router 0 arrives on router 2."""
    prober = Prober(_account(mesh, 2, "user@bench"), _account(mesh, 0, "user@bench"), address)
    container = Container(prober)
    container.run()
    return None if prober.arrived is None else prober.arrived - started


def measure(mesh: Mesh, addresses: list[str], probe_address: str) -> dict[str, Any]:
    model_file(mesh).write_text(_model(addresses))
    target = mesh_target(mesh, mesh.extra["broker"])  # type: ignore[arg-type]
    result: dict[str, float | None] = {}
    started = time.monotonic()

    def run_probe() -> None:
        result["first"] = probe(mesh, probe_address, started)

    prober = threading.Thread(target=run_probe)
    prober.start()
    applied = apply_stack(stack_file(mesh), target, echo=lambda _text: None)
    apply_seconds = time.monotonic() - started
    prober.join()
    return {
        "new_addresses": len(addresses),
        "apply_seconds": round(apply_seconds, 3),
        "seconds_to_first_message": None
        if result.get("first") is None
        else round(result["first"], 3),
        "routers": applied.routers,
        "apply_phases": applied.phases,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with (
        tempfile.TemporaryDirectory() as directory,
        brokered_mesh(Path(directory), routers=3) as mesh,
    ):
        model_file(mesh).write_text(_model([]))
        target = mesh_target(mesh, mesh.extra["broker"])  # type: ignore[arg-type]
        apply_stack(stack_file(mesh), target, echo=lambda _text: None)  # the stack as deployed
        flows = [Flow(_account(mesh, 0, "device@iot"), "telemetry", send=True)]
        flows += [
            Flow(_account(mesh, i % 3, "backend@iot"), "telemetry", send=False)
            for i in range(args.connections - 1)
        ]
        load = LoadProcess(flows, interval=0.005)
        opened = time.monotonic()
        load.start()
        print(
            f"{args.connections} connections open in {time.monotonic() - opened:.1f}s", flush=True
        )
        one = measure(mesh, ["new-0"], "new-0")
        print(
            f"1 new address: first message {one['seconds_to_first_message']}s after apply "
            f"started (apply {one['apply_seconds']}s)",
            flush=True,
        )
        many = [f"new-{n:04d}" for n in range(args.addresses)]
        thousand = measure(mesh, many, many[len(many) // 2])
        print(
            f"{args.addresses} new addresses: first message "
            f"{thousand['seconds_to_first_message']}s "
            f"after apply started (apply {thousand['apply_seconds']}s)",
            flush=True,
        )
        counts = load.stop()
    return {
        "benchmark": "apply_scale",
        "host": platform.node(),
        "cpus": len(__import__("os").sched_getaffinity(0)),
        "connections": args.connections,
        "one": one,
        "thousand": thousand,
        "load": dict(counts),
        "connections_dropped": counts["closed"],
        "deliveries_released_or_modified": counts["released"] + counts["modified"],
        "targets": {
            "one_seconds": TARGETS["one"],
            "thousand_seconds": TARGETS["thousand"],
            "connections_dropped": 0,
        },
        "met": {
            "one": (one["seconds_to_first_message"] or 1e9) < TARGETS["one"],
            "thousand": (thousand["seconds_to_first_message"] or 1e9) < TARGETS["thousand"],
            "dropped": counts["closed"] == 0,
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--addresses", type=int, default=1000)
    args = parser.parse_args()
    results = run(args)
    print(json.dumps(results, indent=2))
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    return 0 if all(results["met"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
