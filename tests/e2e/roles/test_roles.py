"""What each role leaves on the host, checked by molecule's per-role scenarios (-k)."""

from __future__ import annotations

from typing import Any

from tests.e2e.installs import INSTALLED, started_after_install


def test_tls_keys_are_private_and_certificates_verify(
    host: Any, deployment: dict[str, Any]
) -> None:
    ca = deployment["ca"]
    assert host.file(ca).mode == 0o644
    for router in deployment["routers"]:
        for certificate in router["certificates"]:
            key = host.file(certificate["key"])
            assert key.exists and key.mode == 0o600 and key.user == "enmesh"
            verify = host.run(f"openssl verify -CAfile {ca} {certificate['cert']}")
            assert verify.rc == 0, verify.stderr
            names = host.check_output(
                f"openssl x509 -in {certificate['cert']} -noout -ext subjectAltName"
            )
            for name in certificate["dnsNames"]:
                assert f"DNS:{name}" in names


def test_rabbitmq_runs_on_loopback_without_guest(host: Any, deployment: dict[str, Any]) -> None:
    broker = deployment["brokers"][0]
    assert host.supervisor(f"enmesh-rabbitmq-{broker['name']}").is_running
    for port in (broker["ports"]["amqps"], broker["ports"]["mqtts"], broker["ports"]["prometheus"]):
        assert host.socket(f"tcp://{broker['host']}:{port}").is_listening
    users = host.check_output("rabbitmqctl --node rabbit@localhost list_users --silent")
    assert "enmesh-router" in users and "guest" not in users
    plugins = host.check_output("rabbitmq-plugins --node rabbit@localhost list -E -m")
    for plugin in ("rabbitmq_amqp1_0", "rabbitmq_mqtt", "rabbitmq_prometheus"):
        assert plugin in plugins
    queues = host.check_output(
        "rabbitmqctl --node rabbit@localhost list_queues -p enmesh name --silent"
    )
    assert "iot.events" in queues


def test_router_mesh_is_complete(host: Any, deployment: dict[str, Any]) -> None:
    for router in deployment["routers"]:
        assert host.supervisor(f"enmesh-router-{router['id']}").is_running
        url = f"http://{router['host']}:{router['ports']['metrics']}/metrics"
        metrics = host.check_output(
            "python3 -c 'import sys, urllib.request; "
            f"print(urllib.request.urlopen(sys.argv[1]).read().decode())' {url}"
        )
        expected = len(deployment["routers"]) - 1
        lines = [
            line
            for line in metrics.splitlines()
            if line.startswith("enmesh_router_reachable_routers")
        ]
        assert lines and lines[0].endswith(f" {expected}"), lines


def test_router_processes_run_the_installed_enmesh(host: Any, deployment: dict[str, Any]) -> None:
    # A router imports enmesh once: one started before the last install runs old code.
    installed = host.file(INSTALLED)
    assert host.file("/opt/enmesh/routers-install.sha1").content_string == (
        installed.content_string
    )
    for router in deployment["routers"]:
        pid = host.supervisor(f"enmesh-router-{router['id']}").pid
        assert started_after_install(host, pid), f"{router['id']} predates the install"
