"""Editing the rights of a user the console added, against the real mesh: the model's
messages at the rule's field with nothing written, the change through the runtime part
and `enmesh apply`, then a real AMQP client of that user refused a new sender by the
router (its open connection stays open: enmesh-router checks new links against the new
rules and closes only the connections of a user that is gone). Users in git stay in git;
no change without the CSRF token; a failed apply puts the runtime part back."""

from __future__ import annotations

import contextlib
import itertools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from proton import ConnectionException, Endpoint
from proton.utils import BlockingConnection, LinkDetached
from selenium.webdriver.common.by import By

from enmesh.console import runtime
from tests.console.test_console_browser import ops
from tests.support.amqp import Account
from tests.support.browser import click, log_in, text
from tests.support.console import Console, Http, save_screenshot
from tests.support.mesh import Mesh, wait_until

USER = "rights-app"
RIGHTS = f"/spaces/iot/users/{USER}/rights"


def _csrf(http: Http, path: str) -> str:
    token = re.search(r'name="csrf" value="([^"]+)"', http.request("GET", path).read().decode())
    assert token, path
    return token[1]


def _read(path: Path) -> str | None:
    return path.read_text() if path.exists() else None


@pytest.fixture
def added_user(console: Console, mesh: Mesh) -> Iterator[tuple[Http, str]]:
    """rights-app@iot, created by the console: send and recv on telemetry; deleted after."""
    http = Http(console)
    assert http.login(*ops(mesh)).status == 303
    form = {"username": USER, "operations": ["send", "recv"], "addresses": "telemetry"}
    created = http.request(
        "POST", "/spaces/iot/users", {"csrf": _csrf(http, "/spaces/iot/users/new"), **form}
    )
    page = created.read().decode()
    assert created.status == 201, page
    password = re.search(r'<code id="password">([^<]+)</code>', page)
    assert password
    try:
        yield http, password[1]
    finally:
        delete = f"/spaces/iot/users/{USER}/delete"
        confirm = {"csrf": _csrf(http, delete), "confirm": USER}
        assert http.request("POST", delete, confirm).status == 303


def _rules(runtime_file: Path) -> Any:
    documents = yaml.safe_load_all(runtime_file.read_text())
    user = next(d for d in documents if d and d["metadata"]["name"] == f"iot.{USER}")
    return user["spec"]["authorization"]


def _save(driver: Any, addresses: str, **ticked: bool) -> None:
    field = driver.find_element(By.ID, "addresses-0")
    field.clear()
    field.send_keys(addresses)
    for operation, wanted in ticked.items():
        box = driver.find_element(By.ID, f"op-0-{operation}")
        if box.is_selected() != wanted:
            box.click()
    click(driver, driver.find_element(By.ID, "save"))


def test_removing_send_makes_the_router_refuse_the_users_new_senders(
    driver: Any, console: Console, mesh: Mesh, runtime_file: Path, added_user: tuple[Http, str]
) -> None:
    _, password = added_user
    account = Account(mesh.url(0), f"{USER}@iot", password, "iot", mesh.ca)
    client: BlockingConnection = account.blocking()
    try:
        sender_before = client.create_sender("telemetry")  # allowed by its rule
        log_in(driver, console, *ops(mesh))
        driver.get(console.url + "/spaces/iot/users")
        assert not driver.find_elements(By.CSS_SELECTOR, "#user-ops .rights")  # in git
        click(driver, driver.find_element(By.CSS_SELECTOR, f"#user-{USER} .rights"))
        assert driver.find_element(By.ID, "op-0-send").is_selected()
        assert driver.find_element(By.ID, "op-0-recv").is_selected()
        assert driver.find_element(By.ID, "addresses-0").get_attribute("value") == "telemetry"
        before = _read(runtime_file)
        _save(driver, "")  # send and recv on nothing
        assert "need at least one address pattern" in text(driver, "#addresses-0-error")
        _save(driver, "telemetyr")
        assert "no address 'telemetyr' in address space 'iot'" in text(driver, "#addresses-0-error")
        save_screenshot(driver, "user-rights-invalid")
        assert _read(runtime_file) == before  # nothing written, nothing applied
        _save(driver, "telemetry", send=False, recv=True)
        assert text(driver, ".flash") == f"rights of {USER}@iot changed"
        assert _rules(runtime_file) == [{"operations": ["recv"], "addresses": ["telemetry"]}]
        assert "recv on telemetry" in text(driver, f"#user-{USER}")
        save_screenshot(driver, "user-rights")

        probes = itertools.count()

        def new_sender_refused() -> bool:
            try:  # a link name of its own: the first sender is still attached
                client.create_sender("telemetry", name=f"probe-{next(probes)}").close()
            except LinkDetached as exc:
                assert exc.condition == "amqp:unauthorized-access", exc
                assert "no permission to send to 'telemetry'" in str(exc)
                return True
            return False

        wait_until(new_sender_refused, 15, "the router to refuse the user's new sender")
        # Its connection stays open (the user still exists) and may still receive; the
        # link attached before the change keeps going (rules apply to new links).
        client.create_receiver("telemetry").close()
        assert sender_before.link.state & Endpoint.REMOTE_ACTIVE
        fresh = account.blocking()
        try:
            with pytest.raises(LinkDetached, match="no permission to send"):
                fresh.create_sender("telemetry")
        finally:
            fresh.close()
    finally:
        with contextlib.suppress(ConnectionException):
            client.close()


def test_rights_need_the_csrf_token_and_a_user_added_by_the_console(
    console: Console, runtime_file: Path, added_user: tuple[Http, str]
) -> None:
    http, _ = added_user
    before = _read(runtime_file)
    form = {"operations-0": ["send"], "addresses-0": "*"}
    assert Http(console).request("POST", RIGHTS, {**form, "csrf": "x"}).status == 403
    assert http.request("POST", RIGHTS, form).status == 403
    assert http.request("POST", RIGHTS, {**form, "csrf": "forged"}).status == 403
    token = _csrf(http, RIGHTS)
    in_git = http.request("GET", "/spaces/iot/users/ops/rights")
    assert in_git.status == 409 and "defined in git" in in_git.read().decode()
    posted = http.request("POST", "/spaces/iot/users/ops/rights", {**form, "csrf": token})
    assert posted.status == 409
    assert http.request("GET", "/spaces/acme/users/app/rights").status == 404  # not its space
    assert http.request("GET", "/spaces/iot/users/nobody/rights").status == 404
    assert _read(runtime_file) == before


def test_a_failed_apply_puts_the_runtime_part_back(
    runtime_file: Path, added_user: tuple[Http, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    http, _ = added_user
    before = _read(runtime_file)

    def fail(*args: Any, **kwargs: Any) -> None:
        # the change is written before apply runs
        assert _rules(runtime_file) == [{"operations": ["recv"], "addresses": ["telemetry"]}]
        raise RuntimeError("the routers did not reload")

    monkeypatch.setattr(runtime, "apply_stack", fail)
    form = {"csrf": _csrf(http, RIGHTS), "operations-0": ["recv"], "addresses-0": "telemetry"}
    reply = http.request("POST", RIGHTS, form)
    assert reply.status == 400
    assert "apply failed, nothing kept: the routers did not reload" in reply.read().decode()
    assert _read(runtime_file) == before
