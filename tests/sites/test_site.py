"""A deployed site: systemd units, sockets and files on every host (testinfra
over SSH), messages across hosts from real AMQP clients on this machine (through the
site's bridge), then a router host powered off and back on."""

from __future__ import annotations

import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from proton import Timeout
from proton.reactor import Backoff

from enmesh.client_failover import follow_failover_list
from enmesh.clients import DEFAULT_MECHANISMS, connect_options
from enmesh.deploy.smoke import Stack
from enmesh.deploy.smoke import _pump_until_done as pump_until_done
from enmesh.deploy.smoke_run import run_smoke
from tests.sites.clients import (
    RECEIVER,
    SENDER,
    SPACE,
    router_metrics,
    router_url,
    send_until_accepted,
)
from tests.sites.whole import wait_until_whole
from tests.support.amqp import Scenario, run
from tests.support.mesh import reachable_routers_in, wait_until
from tests.support.sites import SiteSpec
from tests.support.sites.debs import role_packages
from tests.support.sites.site import power_off, power_on

WILDCARDS = {"0.0.0.0", "::", "[::]"}
# A queue message in flight on a dead broker node's connection is answered MODIFIED
# after the router's idle timeout (16 s) and resent; its new copy may wait until the
# cluster declares the node down (Erlang's net_ticktime: up to about 90 s).
RECEIVE_PATIENCE = 150.0


def _reachable_routers(router: dict[str, Any]) -> int:
    """What the router's metrics say of the mesh: how many other routers it reaches."""
    reachable = reachable_routers_in(router_metrics(router))
    assert reachable >= 0, f"no enmesh_router_reachable_routers from {router['id']}"
    return reachable


def _units(deployment: dict[str, Any], address: str) -> list[str]:
    routers = [f"enmesh-router-{r['id']}" for r in deployment["routers"] if r["host"] == address]
    brokers = [b for b in deployment["brokers"] if address in {n["host"] for n in b["nodes"]}]
    return (
        routers
        + [f"enmesh-rabbitmq-{b['name']}" for b in brokers]
        + (["enmesh-epmd"] if brokers else [])
    )


def test_every_host_runs_its_units_under_systemd(
    hosts: dict[str, Any], deployment: dict[str, Any]
) -> None:
    for address, host in hosts.items():
        assert host.check_output("cat /proc/1/comm") == "systemd", address
        units = _units(deployment, address)
        assert units, f"{address} runs nothing"
        for unit in units:
            service = host.service(unit)
            assert service.is_enabled and service.is_running, f"{address}: {unit}"
        # The roles' systemd branch: no supervisord anywhere on a systemd host.
        assert not host.package("supervisor").is_installed, address


def test_every_host_got_its_debian_packages_from_the_deployer(
    hosts: dict[str, Any], spark_hosts: dict[str, Any]
) -> None:
    """The hosts boot from an image without the roles' packages and have no route out:
    what they run came from the deployer's apt repository (enmesh_base_debs), which is
    gone from them afterwards; Debian's own broker units never started."""
    router = role_packages("enmesh_base_router_packages")
    router_and_broker = router + role_packages("enmesh_base_broker_packages")
    spark = role_packages("enmesh_spark_packages") + router
    for group, packages in ((hosts, router_and_broker), (spark_hosts, spark)):
        for address, host in group.items():
            routes = host.check_output("ip -4 route show default")
            assert routes == "", f"{address} has a route out: {routes}"
            missing = [name for name in packages if not host.package(name).is_installed]
            assert not missing, f"{address} lacks {missing}"
            assert not host.file("/opt/enmesh/debs").exists, address
    for address, host in hosts.items():
        for unit in ("rabbitmq-server.service", "epmd.socket"):
            state = host.run(f"systemctl is-enabled {unit}").stdout.strip()
            assert state == "masked", f"{address}: {unit} is {state}"


def test_ports_listen_on_the_site_address_only(
    hosts: dict[str, Any], deployment: dict[str, Any]
) -> None:
    for address, host in hosts.items():
        listening = host.socket.get_listening_sockets()
        expected = [
            f"tcp://{address}:{port}"
            for r in deployment["routers"]
            if r["host"] == address
            for port in r["ports"].values()
        ]
        missing = [s for s in expected if s not in listening]
        assert not missing, f"{address} not listening: {missing}"
        # TCP only: beam's resolver keeps an unconnected UDP socket on 0.0.0.0 (a client
        # socket for DNS answers, not a service); sshd is the host's own.
        wildcard = [
            s
            for s in listening
            if s.startswith("tcp://")
            and s[6:].rsplit(":", 1)[0] in WILDCARDS
            and not s.endswith(":22")
        ]
        assert not wildcard, f"{address} listens on every interface: {wildcard}"


def test_secrets_are_readable_by_root_and_the_service_group_only(
    hosts: dict[str, Any], deployment: dict[str, Any]
) -> None:
    secrets = deployment["paths"]["secrets"]
    for address, host in hosts.items():
        folder = host.file(secrets)
        assert (folder.user, folder.group, folder.mode) == ("root", "enmesh", 0o750), address
        for path in host.check_output(f"find {secrets} -type f").split():
            assert host.file(path).mode & 0o007 == 0, f"{address}: {path} is world-readable"


def test_smoke_check_from_the_deployer_through_the_bridge(stack: Stack) -> None:
    lines: list[str] = []
    assert run_smoke(stack, lines.append), "\n".join(lines)


def _through(  # noqa: PLR0917
    stack: Stack,
    deployment: dict[str, Any],
    src: str,
    dst: str,
    address: str,
    count: int,
    patience: float = RECEIVE_PATIENCE,
) -> set[str]:
    """Send `count` messages via the router on `src`, receive them via the one on `dst`;
    the distinct bodies received (a resent message may arrive twice).

    The sender runs in its own thread: on a direct address a send is settled only once
    the receiver accepted it, end to end, so the receiving side must keep going meanwhile.
    `patience` is the longest silence the receiver waits through.
    """
    nonce = uuid.uuid4().hex
    failures: list[BaseException] = []
    retries: list[str] = []

    def send() -> None:
        try:
            # An outcome may wait as long as a message: a queue's leader on a host that
            # lost power holds publishes until its cluster declares it down.
            url = router_url(deployment, src)
            with stack.connect(url, SENDER, SPACE, timeout=patience) as sending:
                sender = sending.create_sender(address)
                for i in range(count):
                    send_until_accepted(sender, f"{nonce} {i}", retries)
        except BaseException as exc:  # reported by the test's thread
            failures.append(exc)

    got: set[str] = set()
    with stack.connect(router_url(deployment, dst), RECEIVER, SPACE) as receiving:
        receiver = receiving.create_receiver(address, credit=count)
        sending = threading.Thread(target=send, name="site-sender", daemon=True)
        sending.start()
        while len(got) < count and not failures:
            try:
                message = receiver.receive(timeout=patience)
            except Timeout as exc:
                raise AssertionError(
                    f"{address} via {src} -> {dst}: {len(got)} of {count} received, then "
                    f"nothing for {patience:.0f} s; the sender's resends: {retries[-3:]}"
                ) from exc
            receiver.accept()
            if str(message.body).startswith(nonce):
                got.add(str(message.body))
        # The last accept must reach the sender before this connection closes.
        pump_until_done(receiving, sending)
    assert not failures, f"sending via {src} failed: {failures[0]!r}"
    return got


@pytest.mark.parametrize("address", ["telemetry", "events"])  # anycast, queue
def test_messages_cross_hosts(stack: Stack, deployment: dict[str, Any], address: str) -> None:
    first, *_, last = sorted({r["host"] for r in deployment["routers"]})
    assert len(_through(stack, deployment, first, last, address, 50)) == 50


def test_messages_flow_while_a_router_host_is_off_and_it_rejoins(
    stack: Stack, deployment: dict[str, Any], site: SiteSpec, hosts: dict[str, Any]
) -> None:
    brokers = {b["host"] for b in deployment["brokers"]}
    victim = next(h for h in site.host_list() if h.address not in brokers)
    others = sorted({r["host"] for r in deployment["routers"]} - {victim.address})
    survivors = [r for r in deployment["routers"] if r["host"] in others]
    meshed = {r["id"]: _reachable_routers(r) for r in survivors}
    power_off(site, victim)
    cut_at = time.monotonic()
    try:
        # The others drop it after helloMaxAgeSeconds (3 s) of silence and route around
        # it; anycast no longer picks the dead host's consumers.
        wait_until(
            lambda: all(_reachable_routers(r) == meshed[r["id"]] - 1 for r in survivors),
            15,
            f"the other routers to lose {victim.address}",
            interval=0.1,
        )
        print(
            f"router host {victim.address} powered off: the mesh went around it in "
            f"{time.monotonic() - cut_at:.1f} s"
        )
        for address in ("telemetry", "events"):
            assert len(_through(stack, deployment, others[0], others[-1], address, 50)) == 50
    finally:
        power_on(site, victim)

    # Its units are enabled: systemd starts the router at boot, and it rejoins the mesh.
    def rejoined() -> bool:
        try:
            got = _through(stack, deployment, victim.address, others[0], "telemetry", 5, 20)
        except Exception:
            return False
        return len(got) == 5

    wait_until(rejoined, 90, f"the router on {victim.address} rejoining the mesh", interval=1)
    wait_until_whole(hosts, deployment)  # its broker node too, before the next check


def test_units_log_to_the_journal(hosts: dict[str, Any], deployment: dict[str, Any]) -> None:
    """systemd hosts keep the programs' logs in the journal (rotated, `journalctl -u`),
    not in files of their own: a router's start is there under its unit."""
    for router in deployment["routers"]:
        host = hosts[router["host"]]
        unit = f"enmesh-router-{router['id']}"
        logged = host.check_output(f"journalctl -u {unit} -o cat --no-pager")
        assert f"router {router['id']} started" in logged, f"{router['host']}: {unit}"
        assert not host.file(f"/var/log/enmesh/{router['id']}.log").exists


class _FollowTheList(Scenario):
    """Connect to one router; once open, follow its failover list and pull the plug of
    its host; finish when the connection is open again (on another host)."""

    def __init__(self, options: dict[str, Any], power_cut: Callable[[], None]) -> None:
        super().__init__()
        self.options, self.power_cut = options, power_cut
        self.containers: list[str] = []
        self.followed: list[str] = []

    def on_start(self, event: Any) -> None:
        self.connections.append(event.container.connect(**self.options))

    def on_connection_opened(self, event: Any) -> None:
        self.containers.append(event.connection.remote_container)
        if len(self.containers) == 1:
            self.followed = follow_failover_list(event.connection)
            self.power_cut()
        else:
            self.done()


def test_a_client_follows_the_failover_list_to_another_host(
    stack: Stack, deployment: dict[str, Any], site: SiteSpec, hosts: dict[str, Any]
) -> None:
    """A proton client given one router's URL only (enmesh.client_failover): its router's
    open frame lists the routers of the other hosts; the host is powered off (no RST, no
    close: heartbeats tell) and the client reconnects to the next router of the list."""
    brokers = {b["host"] for b in deployment["brokers"]}
    victim = next(h for h in site.host_list() if h.address not in brokers)
    options = connect_options(
        router_url(deployment, victim.address),
        user=SENDER,
        password=stack.password(SENDER),
        vhost=SPACE,
        ca=stack.ca,
        mechanisms=DEFAULT_MECHANISMS,
    )
    options |= {"reconnect": Backoff(max_delay=1.0), "heartbeat": 2}
    try:
        scenario = run(_FollowTheList(options, lambda: power_off(site, victim)), timeout=120)
    finally:
        power_on(site, victim)
    wait_until_whole(hosts, deployment)  # its router and broker node back, for what follows
    others = {r["host"] for r in deployment["routers"]} - {victim.address}
    listed = {urllib.parse.urlsplit(url).hostname for url in scenario.followed}
    assert listed == others
    before, after = scenario.containers
    by_id = {r["id"]: r["host"] for r in deployment["routers"]}
    assert by_id[before] == victim.address and by_id[after] in others
