"""A rolling upgrade of the whole site: a new enmesh build deployed one host at a time
(`site.yml -e enmesh_serial=1 -e enmesh_render_source_dir=<new build>`) while a steady
producer and consumer use a queue through the mesh, each moving to another router when
its own restarts. Every message the mesh acknowledged arrives (duplicates counted)."""

from __future__ import annotations

import hashlib
import itertools
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from proton import ProtonException, Timeout

from enmesh.deploy.smoke import Stack
from tests.sites.clients import (
    RECEIVER,
    SENDER,
    SPACE,
    longest_wait,
    router_url,
    send_until_accepted,
)
from tests.sites.conftest import ROOT, STACK
from tests.sites.playbook import run_site_yml
from tests.support.builds import new_build
from tests.support.mesh import wait_until

QUEUE = "events"
RATE = 20.0  # messages per second
INSTALLED = "/opt/enmesh/installed.sha1"  # enmesh_base records the archive it installed
JOB_INSTALL = "/var/lib/enmesh/spark/job-install.sha1"  # the spark role: what the job runs
WHEELHOUSES = ("ENMESH_SITES_WHEELHOUSE", "ENMESH_SITES_SPARK_WHEELHOUSE", "ENMESH_SITES_DEBS")


class _Steady(threading.Thread):
    """Keeps a connection to one of the routers, moving on to the next one when it goes."""

    def __init__(self, stack: Stack, urls: list[str], identity: str) -> None:
        super().__init__(name=f"steady-{identity}", daemon=True)
        self.stack, self.urls, self.identity = stack, urls, identity
        self.stop = threading.Event()
        self.reconnects: list[str] = []

    def run(self) -> None:
        for url in itertools.cycle(self.urls):
            if self.stop.is_set():
                return
            try:
                with self.stack.connect(url, self.identity, SPACE) as connection:
                    self.session(connection)
            except (ProtonException, OSError) as exc:
                self.reconnects.append(f"{url}: {type(exc).__name__}")
                self.stop.wait(0.2)  # back off before the next router

    def session(self, connection: Any) -> None:
        raise NotImplementedError


class _Producer(_Steady):
    def __init__(self, stack: Stack, urls: list[str], nonce: str) -> None:
        super().__init__(stack, urls, SENDER)
        self.nonce, self.sent = nonce, 0
        self.acknowledged: list[tuple[float, str]] = []
        self.retries: list[str] = []

    def session(self, connection: Any) -> None:
        sender = connection.create_sender(QUEUE)
        started = time.monotonic() - self.sent / RATE
        while not self.stop.is_set():
            body = f"{self.nonce} {self.sent}"
            send_until_accepted(sender, body, self.retries)  # again after a reconnect
            self.acknowledged.append((time.monotonic(), body))
            self.sent += 1
            self.stop.wait(max(0.0, started + self.sent / RATE - time.monotonic()))


class _Consumer(_Steady):
    def __init__(self, stack: Stack, urls: list[str], nonce: str) -> None:
        super().__init__(stack, urls, RECEIVER)
        self.nonce = nonce
        self.got: list[str] = []

    def session(self, connection: Any) -> None:
        receiver = connection.create_receiver(QUEUE, credit=50)
        while not self.stop.is_set():
            try:
                message = receiver.receive(timeout=1)
            except Timeout:
                continue
            receiver.accept()
            if str(message.body).startswith(self.nonce):
                self.got.append(str(message.body))


def _installed(hosts: dict[str, Any]) -> dict[str, str]:
    return {address: host.file(INSTALLED).content_string.strip() for address, host in hosts.items()}


def _router_pids(hosts: dict[str, Any], deployment: dict[str, Any]) -> dict[str, int]:
    return {
        r["id"]: hosts[r["host"]].service(f"enmesh-router-{r['id']}").systemd_properties["MainPID"]
        for r in deployment["routers"]
    }


def test_a_rolling_upgrade_under_a_steady_producer_and_consumer_loses_nothing(  # noqa: PLR0917
    tmp_path: Path,
    stack: Stack,
    deployment: dict[str, Any],
    hosts: dict[str, Any],
    spark_hosts: dict[str, Any],
    spark_master: str,
) -> None:
    missing = [name for name in WHEELHOUSES if not os.environ.get(name)]
    assert not missing, f"set {missing}: the hosts install the new build from them"
    every_host = hosts | spark_hosts
    # As on a host where apt installed rabbitmq-server: Debian's epmd socket enabled (on
    # every interface, port 4369). The run must mask it before a reboot lets it take the
    # port from the broker's own epmd.
    broker_host = hosts[deployment["brokers"][0]["host"]]
    broker_host.check_output("systemctl unmask epmd.socket && systemctl enable epmd.socket")
    before, pids_before = _installed(every_host), _router_pids(hosts, deployment)
    tree = new_build(tmp_path / "build", f"rolling upgrade {uuid.uuid4().hex}")

    nonce = uuid.uuid4().hex
    urls = [router_url(deployment, h) for h in sorted({r["host"] for r in deployment["routers"]})]
    producer = _Producer(stack, urls, nonce)
    consumer = _Consumer(stack, urls[::-1], nonce)
    consumer.start()
    producer.start()
    try:
        wait_until(lambda: len(producer.acknowledged) >= RATE * 5, 60, "steady traffic")
        upgrade_began = time.monotonic()
        code, output = run_site_yml(
            tmp_path, extra_vars={"enmesh_serial": "1", "enmesh_render_source_dir": str(tree)}
        )
        upgraded_in = time.monotonic() - upgrade_began
        assert code == 0, output[-4000:]
        producer.stop.set()
        producer.join(60)
        acknowledged = {body for _, body in producer.acknowledged}
        wait_until(
            lambda: acknowledged <= set(consumer.got), 180, "every acknowledged message", 0.5
        )
    finally:
        producer.stop.set()
        consumer.stop.set()
    consumer.join(30)

    archive = ROOT / "build" / STACK / "enmesh-src.tar.gz"
    new = hashlib.sha1(archive.read_bytes()).hexdigest()  # what Ansible's copy records
    after = _installed(every_host)
    assert set(after.values()) == {new} and new not in set(before.values()), (before, after)
    job = spark_hosts[spark_master].file(JOB_INSTALL).content_string.strip()
    assert job == new, "the telemetry job still runs the old build"
    debian_epmd = broker_host.run("systemctl is-enabled epmd.socket").stdout.strip()
    assert debian_epmd == "masked", f"Debian's epmd.socket is {debian_epmd} after the run"
    pids_after = _router_pids(hosts, deployment)
    assert all(pids_after[r] != pids_before[r] for r in pids_before), "a router kept running"

    stalled = longest_wait(upgrade_began, producer.acknowledged)
    print(
        f"rolling upgrade of {len(every_host)} hosts in {upgraded_in:.1f} s under {RATE:g} "
        f"msg/s: {len(acknowledged)} acknowledged, {len(consumer.got)} received "
        f"({len(consumer.got) - len(set(consumer.got))} duplicates), none lost; the "
        f"producer's longest wait {stalled:.2f} s; reconnects: producer "
        f"{len(producer.reconnects)}, consumer {len(consumer.reconnects)}"
    )
