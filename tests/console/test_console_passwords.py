"""A new password from the console, through the user's secret and `enmesh apply` on a real
mesh: a generated one is shown once and is the only one the next login accepts, while a
connection opened with the old one carries on; a chosen one is checked at its field; no
password reaches a log line."""

from __future__ import annotations

import logging
import re

import pytest
from proton import ConnectionException

from tests.support.amqp import Account
from tests.support.console import Console, Http
from tests.support.mesh import Mesh

USER, PAGE = "device@iot", "/spaces/iot/users/device/password"


def _ops(mesh: Mesh) -> tuple[str, str]:
    return "ops@iot", (mesh.secrets_dir / "iot-ops" / "password").read_text().strip()


def _device(mesh: Mesh, password: str) -> Account:
    return Account(mesh.url(1), USER, password, "iot", mesh.ca)


def _form(http: Http, **fields: str) -> dict[str, str]:
    token = re.search(r'name="csrf" value="([^"]+)"', http.request("GET", PAGE).read().decode())
    assert token
    return {"csrf": token[1], **fields}


def test_a_generated_password_replaces_the_old_one_for_new_logins(
    console: Console, mesh: Mesh, caplog: pytest.LogCaptureFixture
) -> None:
    old = (mesh.secrets_dir / "iot-device" / "password").read_text().strip()
    http = Http(console)
    assert http.login(*_ops(mesh)).status == 303
    opened_before = _device(mesh, old).blocking()
    try:
        with caplog.at_level(logging.INFO, logger="enmesh"):
            page = http.request("POST", PAGE, _form(http, mode="generate"))
            assert page.status == 200
            shown = re.search(r'<code id="password">([^<]+)</code>', page.read().decode())
            assert shown and shown[1] != old
            new = shown[1]
            assert (mesh.secrets_dir / "iot-device" / "password").read_text().strip() == new
            with pytest.raises(ConnectionException):
                _device(mesh, old).blocking()  # the old password no longer logs in
            _device(mesh, new).blocking().close()
            opened_before.create_sender("telemetry")  # still open, still allowed
            # put the old one back (other tests log in with it): chosen, typed twice
            back = http.request("POST", PAGE, _form(http, mode="choose", password=old, again=old))
            assert back.status == 303 and back.headers["Location"] == "/spaces/iot/users"
        _device(mesh, old).blocking().close()
        assert new not in caplog.text and old not in caplog.text
        assert "password of device@iot changed" in caplog.text
    finally:
        opened_before.close()


def test_a_chosen_password_is_checked_at_its_field(console: Console, mesh: Mesh) -> None:
    secret = mesh.secrets_dir / "iot-device" / "password"
    before = secret.read_text()
    http = Http(console)
    assert http.login(*_ops(mesh)).status == 303
    short = http.request("POST", PAGE, _form(http, mode="choose", password="short", again="short"))
    assert short.status == 400
    assert "at least 12 characters" in short.read().decode()
    differ = _form(http, mode="choose", password="a-long-password-1", again="a-long-password-2")
    reply = http.request("POST", PAGE, differ)
    assert reply.status == 400 and "the two entries differ" in reply.read().decode()
    assert secret.read_text() == before  # nothing written
    assert http.request("GET", "/spaces/iot/users/nobody/password").status == 404
    assert http.request("GET", "/spaces/acme/users/app/password").status == 404  # not its space
