"""The page of one address against the real mesh and RabbitMQ: its settings, its
producers and consumers (real AMQP clients, with their users), its messages stored; the
chart's empty states (no Prometheus configured; a Prometheus without data); another
space's address is not found. The chart from the real Prometheus: test_console_browser."""

from __future__ import annotations

import json
import re
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from proton import Message
from selenium.webdriver.common.by import By

from tests.console.test_console_browser import ops
from tests.support.amqp import Account
from tests.support.browser import click, log_in, text
from tests.support.console import Console, Http, save_screenshot, serve_console
from tests.support.mesh import Mesh, wait_until


class _NoData(BaseHTTPRequestHandler):
    """A Prometheus that knows no series (a new stack): every query answers no result."""

    queries: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        query = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)
        self.queries.extend(query.get("query", []))
        body = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def empty_prometheus() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NoData)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        thread.join(5)


@pytest.fixture(scope="module")
def console_without_data(mesh: Mesh, empty_prometheus: str) -> Iterator[Console]:
    with serve_console(mesh, prometheus=empty_prometheus) as served:
        yield served


def _client(mesh: Mesh, identity: str) -> Any:
    return Account(mesh.url(1), identity, mesh.passwords[identity], "iot", mesh.ca).blocking()


def _events_page(driver: Any, console: Console) -> dict[str, str]:
    driver.get(console.url + "/spaces/iot/addresses/events")
    rows = driver.find_elements(By.CSS_SELECTOR, "#links tr.link")
    return {
        "stored": text(driver, "#stored"),
        "consumers": text(driver, "#consumers"),
        "producers": text(driver, "#producers"),
        "links": " | ".join(row.text for row in rows),
    }


def test_an_address_page_shows_its_settings_clients_and_stored_messages(
    driver: Any, console: Console, mesh: Mesh
) -> None:
    log_in(driver, console, *ops(mesh))
    click(driver, driver.find_element(By.CSS_SELECTOR, "#address-events a.address"))
    assert driver.current_url.endswith("/spaces/iot/addresses/events")
    settings = text(driver, "#settings")
    assert "queue" in settings and "standard-queue" in settings
    assert "Max deliveries\n5" in settings and "Dead letters to\ndlq" in settings
    assert text(driver, "#rates-status").startswith("No Prometheus configured")
    device = _client(mesh, "device@iot")
    try:
        sender = device.create_sender("events")
        for n in range(3):
            sender.send(Message(body=f"event {n}"))
        wait_until(lambda: _events_page(driver, console)["stored"] == "3 stored", 15, "3 stored")
        page = _events_page(driver, console)
        assert (page["producers"], page["consumers"]) == ("1", "0")
        assert "producer" in page["links"] and "device@iot" in page["links"]
        backend = _client(mesh, "backend@iot")
        try:
            receiver = backend.create_receiver("events", credit=3)
            page = _events_page(driver, console)
            assert (page["producers"], page["consumers"]) == ("1", "1")
            assert "consumer" in page["links"] and "backend@iot" in page["links"]
            save_screenshot(driver, "address")
            bodies = []
            for _ in range(3):
                bodies.append(receiver.receive(timeout=10).body)
                receiver.accept()
            assert bodies == ["event 0", "event 1", "event 2"]
            receiver.close()  # runs the connection: the acceptances reach the broker
            wait_until(
                lambda: _events_page(driver, console)["stored"] == "0 stored", 15, "0 stored"
            )
        finally:
            backend.close()
    finally:
        device.close()


def test_another_spaces_address_is_not_found(console: Console, mesh: Mesh) -> None:
    http = Http(console)
    assert http.login(*ops(mesh)).status == 303
    assert http.request("GET", "/spaces/iot/addresses/telemetry").status == 200
    mine = http.request("GET", "/spaces/iot/addresses/orders")  # acme has it, iot has not
    assert mine.status == 404 and "no address &#39;orders&#39; in &#39;iot&#39;" in (
        mine.read().decode()
    )
    assert http.request("GET", "/spaces/acme/addresses/orders").status == 404
    assert http.request("GET", "/spaces/acme/rates.json?address=orders").status == 404
    # no Prometheus configured: the chart's data says so
    reply = http.request("GET", "/spaces/iot/rates.json?address=telemetry")
    assert reply.status == 404 and "no Prometheus" in json.loads(reply.read())["error"]


def test_a_prometheus_without_data_shows_an_empty_chart(
    driver: Any, console_without_data: Console, mesh: Mesh
) -> None:
    http = Http(console_without_data)
    assert http.login(*ops(mesh)).status == 303
    _NoData.queries.clear()
    reply = http.request("GET", "/spaces/iot/rates.json?address=telemetry")
    assert reply.status == 200 and json.loads(reply.read())["empty"] is True
    assert _NoData.queries and all('address="iot/telemetry"' in q for q in _NoData.queries)
    assert http.request("GET", "/spaces/iot/rates.json?address=orders").status == 404
    log_in(driver, console_without_data, *ops(mesh))
    driver.get(console_without_data.url + "/spaces/iot/addresses/telemetry")
    wait_until(
        lambda: text(driver, "#rates-status") == "Prometheus has no data for the last hour.",
        15,
        "the chart's empty state",
    )
    assert not driver.find_element(By.ID, "rates-chart").is_displayed()
    save_screenshot(driver, "address-no-data")


def test_an_address_with_a_slash_has_its_page_and_is_deleted(
    console: Console, mesh: Mesh, runtime_file: Path
) -> None:
    """MQTT topics are addresses with `/` (anycast and multicast may have them)."""
    http = Http(console)
    assert http.login(*ops(mesh)).status == 303

    def csrf(path: str) -> str:
        page = http.request("GET", path).read().decode()
        token = re.search(r'name="csrf" value="([^"]+)"', page)
        assert token, page
        return token[1]

    form = {"address": "jobs/fleet/t1", "type": "multicast", "plan": "standard-multicast"}
    token = csrf("/spaces/iot/addresses/new")
    created = http.request("POST", "/spaces/iot/addresses", {**form, "csrf": token})
    assert created.status == 303, re.findall(r"error[^>]*>([^<]+)<", created.read().decode())
    assert "jobs/fleet/t1" in runtime_file.read_text()
    assert http.request("GET", "/spaces/iot/addresses/jobs/fleet/t1").status == 200
    delete = "/spaces/iot/addresses/jobs/fleet/t1/delete"
    token = csrf(delete)
    answer = http.request("POST", delete, {"csrf": token, "confirm": "jobs/fleet/t1"})
    assert answer.status == 303
    assert "jobs/fleet/t1" not in runtime_file.read_text()
    assert http.request("GET", "/spaces/iot/addresses/jobs/fleet/t1").status == 404
