"""The console's HTTP security, checked with a plain HTTPS client that trusts only the
stack's CA: the certificate, the session cookie's flags, CSRF on every change, no password
in any log line."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from tests.support.console import Console, Http
from tests.support.mesh import Mesh


def _ops(mesh: Mesh) -> tuple[str, str]:
    return "ops@iot", (mesh.secrets_dir / "iot-ops" / "password").read_text().strip()


def test_the_session_cookie_is_secure_httponly_samesite(console: Console, mesh: Mesh) -> None:
    http = Http(console)  # the handshake checks the certificate against the stack's CA
    response = http.login(*_ops(mesh))
    assert response.status == 303 and response.headers["Location"] == "/"
    session = [h for h in http.set_cookie_headers if h.startswith("enmesh_console=")]
    assert len(session) == 1
    flags = {part.strip().lower() for part in session[0].split(";")[1:]}
    assert {"secure", "httponly", "samesite=strict"} <= flags
    assert "default-src 'self'" in response.headers["Content-Security-Policy"]


def test_changes_without_session_or_csrf_token_are_refused(
    console: Console, mesh: Mesh, runtime_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    before = runtime_file.read_text() if runtime_file.exists() else None
    form = {"address": "jobs-csrf", "type": "anycast", "plan": "standard-anycast"}
    anonymous = Http(console)
    assert anonymous.request("POST", "/spaces/iot/addresses", form).status == 403
    http = Http(console)
    identity, password = _ops(mesh)
    with caplog.at_level(logging.INFO, logger="enmesh.console"):
        assert http.login(identity, password).status == 303
    assert http.request("POST", "/spaces/iot/addresses", form).status == 403
    forged = http.request("POST", "/spaces/iot/addresses", {**form, "csrf": "forged"})
    assert forged.status == 403
    assert http.request("POST", "/logout", {}).status == 403
    assert (
        http.request("POST", "/login", {"username": identity, "password": password}).status == 403
    )
    assert (runtime_file.read_text() if runtime_file.exists() else None) == before
    page = http.request("GET", "/spaces/iot").read().decode()
    assert "jobs-csrf" not in page
    assert re.search(r'name="csrf" value="[^"]{40,}"', page)
    assert password not in caplog.text and password not in page
