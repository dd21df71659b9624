"""The console in a real browser (Debian's Chromium through Selenium) against a real mesh
and RabbitMQ: login and its refusals, a tenant kept to its space, an address created,
used by a real AMQP client, and deleted, the model's validation messages at their
fields, a client's connection closed. Each page's screenshot is saved as an artefact."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from proton import ConnectionException, Message
from proton.utils import BlockingConnection
from selenium.webdriver.common.by import By

from tests.router.conftest import account
from tests.router.test_metrics import send
from tests.support.amqp import Account
from tests.support.browser import click, close_connection, log_in, new_address, new_user, text
from tests.support.console import Console, Http, save_screenshot
from tests.support.mesh import Mesh, wait_until
from tests.support.qdmanage import ADMINISTRATOR


def ops(mesh: Mesh) -> tuple[str, str]:
    password = (mesh.secrets_dir / "iot-ops" / "password").read_text().strip()
    mesh.passwords.setdefault("ops@iot", password)
    return "ops@iot", password


def test_a_wrong_password_and_a_user_without_manage_are_refused(
    driver: Any, console: Console, mesh: Mesh
) -> None:
    identity, password = ops(mesh)
    log_in(driver, console, identity, password + "x")
    assert text(driver, "#login-error") == "wrong username or password"
    save_screenshot(driver, "login-refused")
    log_in(driver, console, "device@iot", mesh.passwords["device@iot"])
    assert "has no `manage` right" in text(driver, "#login-error")
    assert not driver.find_elements(By.ID, "logout")


def test_a_tenant_sees_only_its_own_space(driver: Any, console: Console, mesh: Mesh) -> None:
    log_in(driver, console, *ops(mesh))
    assert driver.current_url.endswith("/spaces/iot")
    driver.get(console.url + "/spaces")
    spaces = [
        row.text.split()[0] for row in driver.find_elements(By.CSS_SELECTOR, "#spaces tbody tr")
    ]
    assert spaces == ["iot"]
    save_screenshot(driver, "spaces")
    driver.set_window_size(390, 844)  # a phone: wide tables scroll inside the page
    try:
        driver.get(console.url + "/spaces/iot")
        overflow = "return document.documentElement.scrollWidth - window.innerWidth"
        assert driver.execute_script(overflow) <= 0
        save_screenshot(driver, "narrow")
    finally:
        driver.set_window_size(1200, 900)
    driver.get(console.url + "/spaces/acme")
    assert text(driver, "#error") == "no address space 'acme'"
    driver.get(console.url + "/spaces/acme/connections")
    assert text(driver, "#error") == "no address space 'acme'"
    click(driver, driver.find_element(By.ID, "logout"))
    driver.get(console.url + "/spaces/iot")
    assert driver.current_url.endswith("/login")


def test_the_models_messages_show_at_their_fields_and_nothing_is_applied(
    driver: Any, console: Console, mesh: Mesh, runtime_file: Path
) -> None:
    before = runtime_file.read_text() if runtime_file.exists() else None
    log_in(driver, console, *ops(mesh))
    new_address(driver, console, address="bad name!", type="anycast", plan="standard-anycast")
    assert text(driver, "#address-error") == (
        "expected an AMQP address of letters, digits, '_', '.', '-' and '/', got 'bad name!'"
    )
    save_screenshot(driver, "address-invalid")
    new_address(driver, console, address="telemetry", type="anycast", plan="standard-anycast")
    assert "duplicate address 'telemetry'" in text(driver, "#address-error")
    new_address(
        driver,
        console,
        address="jobs-audit",
        type="subscription",
        plan="standard-subscription",
        topic="no-such-topic",
    )
    assert "no-such-topic" in text(driver, "#topic-error")
    new_address(driver, console, address="jobs-x", type="queue", plan="standard-anycast")
    assert "standard-anycast" in text(driver, "#plan-error")
    new_address(
        driver, console, address="jobs-y", type="queue", plan="standard-queue", ttlSeconds="soon"
    )
    assert "integer" in text(driver, "#ttlSeconds-error")
    assert (runtime_file.read_text() if runtime_file.exists() else None) == before


def _stored(driver: Any, console: Console, address: str) -> str:
    driver.get(console.url + "/spaces/iot")
    return text(driver, f"#address-{address} .stored")


def test_create_a_queue_use_it_and_delete_it(
    driver: Any, console: Console, mesh: Mesh, runtime_file: Path
) -> None:
    log_in(driver, console, *ops(mesh))
    new_address(
        driver, console, address="jobs", type="queue", plan="standard-queue", maxDeliveries="3"
    )
    assert text(driver, ".flash") == "address jobs created"
    assert "jobs" in runtime_file.read_text()
    assert text(driver, "#address-jobs .stored") == "0 stored"
    connection = account(mesh, 1, "ops@iot").blocking()
    try:
        sender = connection.create_sender("jobs")
        for n in range(5):
            sender.send(Message(body=f"job {n}"))
        # RabbitMQ's counts follow the queue's state a moment later: poll the page.
        wait_until(lambda: _stored(driver, console, "jobs") == "5 stored", 15, "5 stored")
        save_screenshot(driver, "addresses")
        receiver = connection.create_receiver("jobs", credit=2)
        bodies = []
        for _ in range(2):
            bodies.append(receiver.receive(timeout=10).body)
            receiver.accept()
        assert bodies == ["job 0", "job 1"]
        receiver.close()
        wait_until(lambda: _stored(driver, console, "jobs") == "3 stored", 15, "3 stored")
    finally:
        connection.close()
    click(driver, driver.find_element(By.CSS_SELECTOR, "#address-jobs .delete"))
    assert text(driver, "#stored-warning") == "3 messages stored on the brokers will be lost."
    save_screenshot(driver, "address-delete")
    click(driver, driver.find_element(By.ID, "delete"))  # without typing the name: kept
    assert "not deleted" in text(driver, ".flash")
    driver.find_element(By.ID, "confirm").send_keys("jobs")
    click(driver, driver.find_element(By.ID, "delete"))
    assert text(driver, ".flash") == "address jobs deleted"
    assert not driver.find_elements(By.ID, "address-jobs")
    assert "jobs" not in runtime_file.read_text()


def test_the_administrator_sees_every_space_and_closes_a_connection(
    driver: Any, admin_console: Console, admin_mesh: Mesh
) -> None:
    console, mesh = admin_console, admin_mesh
    identity, password = "ops@iot", mesh.passwords["ops@iot"]
    client: BlockingConnection = account(mesh, 0, identity).blocking()

    def closed() -> bool:
        try:
            client.create_sender("jobs-probe")
        except ConnectionException:
            return True
        return False

    try:
        assert not closed()
        log_in(driver, console, identity, password)  # a tenant's manage right reads only
        driver.get(console.url + "/spaces/iot/connections")
        assert driver.find_elements(By.CSS_SELECTOR, "tr.connection")
        assert not driver.find_elements(By.CSS_SELECTOR, "button.close")
        log_in(driver, console, ADMINISTRATOR, mesh.passwords[ADMINISTRATOR])
        assert driver.current_url.endswith("/spaces")
        spaces = driver.find_elements(By.CSS_SELECTOR, "#spaces tbody tr")
        assert [row.text.split()[0] for row in spaces] == ["acme", "iot"]
        rows = "#router-test-router-0 tr.connection"
        close_connection(driver, console, identity, rows, "connections")
        wait_until(closed, 10, "the client's connection to be closed")
    finally:
        with contextlib.suppress(ConnectionException):
            client.close()


def _peak_in(http: Http, address: str | None = None) -> float | None:
    """The highest rate of messages in over the last hour on the chart (None: no point)."""
    query = f"?address={address}" if address else ""
    reply = http.request("GET", f"/spaces/iot/rates.json{query}")
    assert reply.status == 200
    series = json.loads(reply.read())["datasets"][0]["data"]
    return max((value for value in series if value is not None), default=None)


def test_the_space_page_charts_the_last_hour_from_prometheus(
    driver: Any, admin_console: Console, admin_mesh: Mesh
) -> None:
    http = Http(admin_console)
    assert http.login("ops@iot", admin_mesh.passwords["ops@iot"]).status == 303

    def messages_in() -> float | None:
        return _peak_in(http)

    # A recorded rate (two samples) before the messages, so rate() sees them arrive.
    wait_until(lambda: messages_in() is not None, 30, "Prometheus to record a first rate")
    send(admin_mesh, 40, producer_at=0, consumer_at=0)  # into iot/telemetry
    wait_until(lambda: (messages_in() or 0) > 0, 30, "Prometheus to record the space's rate")
    log_in(driver, admin_console, "ops@iot", admin_mesh.passwords["ops@iot"])
    drawn = "return Chart.getChart(document.getElementById('rates-chart'))?.data.datasets.length"
    wait_until(lambda: driver.execute_script(drawn) == 2, 15, "Chart.js to draw the chart")
    # The table's rates: the last minute's, per address (the 40 messages in, and out).
    assert float(text(driver, "#address-telemetry .rate-in")) > 0
    assert float(text(driver, "#address-telemetry .rate-out")) > 0
    assert text(driver, "#address-broadcast .rate-in") == "0.00"
    save_screenshot(driver, "space")


def test_an_address_page_charts_that_addresss_last_hour(
    driver: Any, admin_console: Console, admin_mesh: Mesh
) -> None:
    http = Http(admin_console)
    assert http.login("ops@iot", admin_mesh.passwords["ops@iot"]).status == 303
    wait_until(lambda: _peak_in(http, "telemetry") is not None, 30, "a first rate of telemetry")
    send(admin_mesh, 40, producer_at=0, consumer_at=0)  # into iot/telemetry
    wait_until(lambda: (_peak_in(http, "telemetry") or 0) > 0, 30, "telemetry's rate")
    assert (_peak_in(http, "broadcast") or 0) == 0  # the chart of one address, not the space's
    log_in(driver, admin_console, "ops@iot", admin_mesh.passwords["ops@iot"])
    click(driver, driver.find_element(By.CSS_SELECTOR, "#address-telemetry a.address"))
    assert driver.current_url.endswith("/spaces/iot/addresses/telemetry")
    drawn = "return Chart.getChart(document.getElementById('rates-chart'))?.data.datasets"
    wait_until(lambda: driver.execute_script(drawn + ".length") == 2, 15, "the address's chart")
    points = driver.execute_script(drawn + "[0].data")
    assert max(value or 0 for value in points) > 0
    save_screenshot(driver, "address-chart")


def test_create_a_user_connect_with_the_shown_password_then_delete_it(
    driver: Any, console: Console, mesh: Mesh, runtime_file: Path
) -> None:
    log_in(driver, console, *ops(mesh))

    new_user(driver, console, "Bad_Name", ["send"], "jobs*")
    assert "Bad_Name" in text(driver, "#username-error")
    new_user(driver, console, "jobs-app", ["send"], "")
    assert "need at least one address pattern" in text(driver, "#operations-error")
    assert "jobs-app" not in (runtime_file.read_text() if runtime_file.exists() else "")
    new_user(driver, console, "jobs-app", ["send", "recv"], "jobs*")
    password = text(driver, "#password")
    assert len(password) >= 16
    save_screenshot(driver, "user-created")
    client = Account(mesh.url(0), "jobs-app@iot", password, "iot", mesh.ca).blocking()

    def closed() -> bool:  # the routers close a removed user's connections
        try:
            client.create_sender("jobs-probe")  # allowed by its rule
        except ConnectionException:
            return True
        return False

    try:
        assert not closed()
        driver.get(console.url + "/spaces/iot/users")
        click(driver, driver.find_element(By.CSS_SELECTOR, "#user-jobs-app .delete"))
        driver.find_element(By.ID, "confirm").send_keys("jobs-app")
        click(driver, driver.find_element(By.ID, "delete"))
        assert text(driver, ".flash") == "user jobs-app deleted"
        wait_until(closed, 15, "the deleted user's connection to be closed")
    finally:
        with contextlib.suppress(ConnectionException):
            client.close()
    assert "jobs-app" not in runtime_file.read_text()


def test_the_mesh_page_shows_which_routers_are_up(
    driver: Any, admin_console: Console, admin_mesh: Mesh
) -> None:
    log_in(driver, admin_console, ADMINISTRATOR, admin_mesh.passwords[ADMINISTRATOR])
    click(driver, driver.find_element(By.ID, "mesh-link"))
    for this, other in (("test-router-0", "test-router-1"), ("test-router-1", "test-router-0")):
        assert text(driver, f"#mesh-{this} .state") == "up"
        assert other in text(driver, f"#mesh-{this} .reaches")
    save_screenshot(driver, "mesh")
    admin_mesh.routers[1].stop()  # the last test of this mesh

    def router_1_down() -> bool:
        driver.get(admin_console.url + "/mesh")
        return text(driver, "#mesh-test-router-1 .state").startswith("down") and (
            text(driver, "#mesh-test-router-0 .reaches") == "no other router"
        )

    wait_until(router_1_down, 30, "the mesh page to show router 1 down")
