"""enmesh-console for tests: served by uvicorn (HTTPS, a certificate from the test stack's
CA) in a thread of the test process, in front of a real mesh + RabbitMQ; and Debian's
Chromium driven by Selenium through Debian's chromedriver (no browser download)."""

from __future__ import annotations

import json
import re
import ssl
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from http.client import HTTPResponse
from pathlib import Path
from typing import Any

import uvicorn
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from enmesh.console.app import Settings, create_app
from enmesh.console.main import oidc_of, routers_of
from enmesh.console.pagination import PAGE_SIZE
from tests.support.apply_target import mesh_target, stack_file
from tests.support.mesh import Mesh, wait_until
from tests.support.pki import Pki, reissue
from tests.support.ports import free_port_block
from tests.support.rabbitmq import RabbitMQBroker

# The iot tenant's operator: manages the space, sends to and receives from `jobs*`
# (the addresses the tests create), so a real client can use what the console creates.
OPS = """
---
apiVersion: enmesh.io/v1
kind: MessagingUser
metadata: {name: iot.ops}
spec:
  addressSpace: iot
  username: ops
  authentication:
    passwordSecret: {name: iot-ops, key: password}
  authorization:
    - operations: [send, recv]
      addresses: ["jobs*"]
    - operations: [manage]
"""

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")


@dataclass(frozen=True)
class Console:
    url: str
    ca: Path


@contextmanager
def serve_console(
    mesh: Mesh,
    administrator: str | None = None,
    prometheus: str | None = None,
    page_size: int = PAGE_SIZE,
) -> Iterator[Console]:
    """The console of `mesh`, on a free port, until the block ends."""
    pki = mesh.extra["pki"]
    assert isinstance(pki, Pki)
    pair = reissue(pki, "console", hostnames=("localhost", "127.0.0.1"))
    deployment = json.loads((mesh.directory / "config" / "deploy.json").read_text())
    broker = mesh.extra.get("broker")
    settings = Settings(
        stack_file=stack_file(mesh),
        routers=routers_of(deployment),
        ca=mesh.ca,
        target=lambda: mesh_target(mesh, broker if isinstance(broker, RabbitMQBroker) else None),
        administrator=administrator,
        prometheus=prometheus,
        page_size=page_size,
    )
    port = free_port_block(1)
    # On a Keycloak stack whose console client's secret is there: its Keycloak login too.
    settings = replace(settings, oidc=oidc_of(deployment, f"https://127.0.0.1:{port}", mesh.ca))
    config = uvicorn.Config(
        create_app(settings),
        host="127.0.0.1",
        port=port,
        ssl_certfile=str(pair.cert),
        ssl_keyfile=str(pair.key),
        log_level="warning",
        timeout_graceful_shutdown=3,  # the browser keeps connections open
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="console", daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started or not thread.is_alive(), 20, "the console to listen")
        assert thread.is_alive(), "the console's server stopped at start"
        yield Console(f"https://127.0.0.1:{port}", mesh.ca)
    finally:
        server.should_exit = True
        thread.join(15)


class Http:
    """A plain HTTPS client that checks the console's certificate against the stack's CA
    and keeps cookies: for requests a browser would not make (no CSRF token)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.context = ssl.create_default_context(cafile=str(console.ca))
        self.cookies: dict[str, str] = {}
        self.set_cookie_headers: list[str] = []

    def request(
        self, method: str, path: str, form: Mapping[str, str | list[str]] | None = None
    ) -> HTTPResponse:
        """`form`: a field given a list is sent once per item (checkboxes)."""
        data = urllib.parse.urlencode(form, doseq=True).encode() if form is not None else None
        request = urllib.request.Request(self.console.url + path, data=data, method=method)
        if self.cookies:
            request.add_header("Cookie", "; ".join(f"{k}={v}" for k, v in self.cookies.items()))
        opener = urllib.request.build_opener(
            urllib.request.HTTPSHandler(context=self.context), NoRedirect()
        )
        try:
            response: HTTPResponse = opener.open(request, timeout=30)
        except urllib.error.HTTPError as error:
            response = error  # type: ignore[assignment]
        for header in response.headers.get_all("Set-Cookie") or []:
            self.set_cookie_headers.append(header)
            name, _, rest = header.partition("=")
            self.cookies[name] = rest.split(";", 1)[0].strip('"')
        return response

    def login(self, username: str, password: str) -> HTTPResponse:
        page = self.request("GET", "/login").read().decode()
        token = re.search(r'name="csrf" value="([^"]+)"', page)
        assert token, page
        return self.request(
            "POST", "/login", {"csrf": token[1], "username": username, "password": password}
        )


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def browser(downloads: Path) -> Any:
    """Headless Chromium from Debian; the certificate is checked by `Http` instead (Chromium
    reads trust from an NSS database this test does not set up)."""
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
        raise RuntimeError(f"missing {', '.join(missing)}: run `make setup` (scripts/setup.sh)")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1200,900",
        f"--user-data-dir={downloads / 'profile'}",
    ):
        options.add_argument(argument)
    options.accept_insecure_certs = True
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    driver.implicitly_wait(0)
    return driver


def save_screenshot(driver: Any, name: str) -> Path:
    """A screenshot of the page as a test artefact (build/console-screenshots/)."""
    folder = Path(__file__).resolve().parents[2] / "build" / "console-screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    driver.save_screenshot(str(path))
    return path
