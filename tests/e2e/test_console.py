"""The console of the running stack (the `console` role of `make up`) in a real browser:
Debian's Chromium through Selenium, real AMQP clients, the stack's own routers, RabbitMQ and
secrets. The iot tenant's manager logs in (a wrong password refused, `acme` out of reach),
creates a queue and a user, the user's client connects with the password the page showed
and sends 5 messages ("5 stored"), the administrator closes that client's connection, and
the user and the queue are deleted. Each page's screenshot is saved (build/console-screenshots/)."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from proton import ConnectionException, Message
from proton.utils import BlockingConnection
from selenium.webdriver.common.by import By

from enmesh.clients import connect_options
from enmesh.compile import load_stack
from enmesh.compile.stack import runtime_dir
from enmesh.deploy.smoke import Stack
from tests.support.browser import (
    chromium_session,
    click,
    close_connection,
    log_in,
    new_address,
    new_user,
    text,
)
from tests.support.console import Console, Http, save_screenshot
from tests.support.mesh import wait_until

MANAGER = "backend@iot"  # the iot space's user with `manage` (stacks/iot.model.yml)
QUEUE, USER = "e2e-console-jobs", "e2e-console-app"


@pytest.fixture(scope="module")
def console(endpoints: dict[str, Any]) -> Console:
    if not endpoints.get("console"):
        pytest.skip("this stack runs no console (spec.console)")
    return Console(str(endpoints["console"]).rstrip("/"), Path(endpoints["ca"]))


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    yield from chromium_session(tmp_path_factory)


@pytest.fixture
def runtime_kept(build_dir: Path, stack: Stack) -> Iterator[Path]:
    """The runtime part of the model as it was, put back (and applied) if the test left
    anything in it, with the secrets of users it created, so a failed run does not leave
    its queue or user in the stack."""
    stack_file = Path(__file__).resolve().parents[2] / "stacks" / f"{build_dir.name}.stack.yml"
    runtime = runtime_dir(load_stack(stack_file)[0]) / "console.model.yml"
    before = runtime.read_text() if runtime.exists() else None
    secrets_before = set(stack.secrets_dir.iterdir())
    yield runtime
    try:
        if (runtime.read_text() if runtime.exists() else None) != before:
            if before is None:
                runtime.unlink()
            else:
                runtime.write_text(before)
            apply = [sys.executable, "-m", "enmesh.cli", "apply", "--stack", str(stack_file)]
            forced = ["--force", f"iot.{QUEUE}"]  # the broker's queue
            subprocess.run([*apply, *forced], check=True, capture_output=True, timeout=300)
    finally:
        for secret in set(stack.secrets_dir.iterdir()) - secrets_before:
            shutil.rmtree(secret)


def test_the_console_is_supervised_on_loopback_with_a_certificate_of_the_stacks_ca(
    host: Any, deployment: dict[str, Any], console: Console
) -> None:
    assert host.supervisor("enmesh-console").is_running
    settings = deployment["console"]
    assert host.socket(f"tcp://{settings['host']}:{settings['port']}").is_listening
    certificate = settings["certificates"][0]
    assert host.file(certificate["key"]).mode == 0o600
    verify = host.run(f"openssl verify -CAfile {deployment['ca']} {certificate['cert']}")
    assert verify.rc == 0, verify.stderr
    # The login page over HTTPS, checked against the CA only (Http's context).
    assert Http(console).request("GET", "/login").status == 200


def _client(stack: Stack, identity: str, password: str) -> BlockingConnection:
    options = connect_options(
        stack.urls[0],
        user=identity,
        password=password,
        vhost="iot",
        ca=stack.ca,
        mechanisms="SCRAM-SHA-256",
    )
    options.pop("reconnect")
    return BlockingConnection(timeout=30, **options)


def _stored(driver: Any, console: Console) -> str:
    driver.get(f"{console.url}/spaces/iot?q={QUEUE}")
    return text(driver, f"#address-{QUEUE} .stored")


def _refused_then_kept_to_its_space(driver: Any, console: Console, stack: Stack) -> None:
    log_in(driver, console, MANAGER, "not-the-password")
    assert text(driver, "#login-error") == "wrong username or password"
    save_screenshot(driver, "e2e-login-refused")
    log_in(driver, console, MANAGER, stack.password(MANAGER))
    assert driver.current_url.endswith("/spaces/iot")
    driver.get(console.url + "/spaces/acme")
    assert text(driver, "#error") == "no address space 'acme'"
    http = Http(console)
    assert http.login(MANAGER, stack.password(MANAGER)).status == 303
    assert http.request("GET", "/spaces/acme").status == 404


def _send_five_then_close_as_administrator(
    driver: Any, console: Console, stack: Stack, administrator: dict[str, str], password: str
) -> None:
    identity = f"{USER}@iot"
    client = _client(stack, identity, password)

    def closed() -> bool:
        try:
            client.create_sender(QUEUE)
        except ConnectionException:
            return True
        return False

    try:
        sender = client.create_sender(QUEUE)
        for n in range(5):
            sender.send(Message(body=f"job {n}"))
        wait_until(lambda: _stored(driver, console) == "5 stored", 30, "5 stored")
        save_screenshot(driver, "e2e-stored")
        secret = stack.secrets_dir / administrator["secret"] / administrator["key"]
        log_in(driver, console, administrator["identity"], secret.read_text().strip())
        close_connection(driver, console, identity, "tr.connection", "e2e-connections")
        wait_until(closed, 15, "the client's connection to be closed")
    finally:
        with contextlib.suppress(ConnectionException):
            client.close()


def _delete(driver: Any, console: Console, page: str, row: str, name: str) -> None:
    driver.get(console.url + page)
    click(driver, driver.find_element(By.CSS_SELECTOR, f"#{row} .delete"))
    driver.find_element(By.ID, "confirm").send_keys(name)
    click(driver, driver.find_element(By.ID, "delete"))


def test_the_iot_manager_runs_its_space_and_the_administrator_closes_a_connection(
    driver: Any, console: Console, stack: Stack, deployment: dict[str, Any], runtime_kept: Path
) -> None:
    _refused_then_kept_to_its_space(driver, console, stack)
    new_address(driver, console, address=QUEUE, type="queue", plan="standard-queue")
    assert text(driver, ".flash") == f"address {QUEUE} created"
    assert QUEUE in runtime_kept.read_text()
    save_screenshot(driver, "e2e-space")
    new_user(driver, console, USER, ["send", "recv"], QUEUE)
    password = text(driver, "#password")
    save_screenshot(driver, "e2e-user-created")

    administrator = deployment["administrator"]
    _send_five_then_close_as_administrator(driver, console, stack, administrator, password)

    log_in(driver, console, MANAGER, stack.password(MANAGER))
    _delete(driver, console, "/spaces/iot/users", f"user-{USER}", USER)
    assert text(driver, ".flash") == f"user {USER} deleted"
    driver.get(f"{console.url}/spaces/iot?q={QUEUE}")
    click(driver, driver.find_element(By.CSS_SELECTOR, f"#address-{QUEUE} .delete"))
    assert text(driver, "#stored-warning") == "5 messages stored on the brokers will be lost."
    driver.find_element(By.ID, "confirm").send_keys(QUEUE)
    click(driver, driver.find_element(By.ID, "delete"))
    assert text(driver, ".flash") == f"address {QUEUE} deleted"
    assert QUEUE not in runtime_kept.read_text()
    assert USER not in runtime_kept.read_text()
