"""Real python-qpid-proton clients for tests: connect as a model user to a vhost.

Scenarios subclass `Scenario` (a MessagingHandler) and call `run(scenario, timeout)`:
the container runs in this thread and a timer fails the test if the scenario does not
finish (close its connections) in time.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proton import SSLDomain
from proton.handlers import MessagingHandler
from proton.reactor import Container


@dataclass(frozen=True)
class Account:
    """Who connects, to which address space, and how."""

    url: str
    identity: str | None  # `user@space`; None for ANONYMOUS
    password: str | None
    vhost: str
    ca: Path | None = None
    mechanisms: str = "SCRAM-SHA-256"

    def connect(self, container: Container, **extra: Any) -> Any:
        options: dict[str, Any] = {
            "url": self.url,
            "virtual_host": self.vhost,
            "reconnect": False,
            "sasl_enabled": True,
            "allowed_mechs": self.mechanisms if self.identity else "ANONYMOUS",
        }
        if self.identity:
            options |= {"user": self.identity, "password": self.password}
        if self.url.startswith("amqps"):
            domain = SSLDomain(SSLDomain.MODE_CLIENT)
            if self.ca is not None:
                domain.set_trusted_ca_db(str(self.ca))
            domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME)
            options["ssl_domain"] = domain
        return container.connect(**options, **extra)


class ScenarioTimeoutError(AssertionError):
    pass


class Scenario(MessagingHandler):  # type: ignore[misc]
    """A test scenario; call `self.done(event)` (or close everything) to finish."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.connections: list[Any] = []
        self.errors: list[str] = []
        self.container: Container | None = None
        self.timeout_task: Any = None

    def open(self, account: Account) -> Any:
        assert self.container is not None
        connection = account.connect(self.container)
        self.connections.append(connection)
        return connection

    def done(self) -> None:
        """Close every connection cleanly; the container then ends by itself."""
        for connection in self.connections:
            connection.close()
        if self.timeout_task is not None:
            self.timeout_task.cancel()

    def on_transport_error(self, event: Any) -> None:
        condition = event.transport.condition
        self.errors.append(f"{condition.name}: {condition.description}" if condition else "error")

    def on_connection_error(self, event: Any) -> None:
        condition = event.connection.remote_condition
        self.errors.append(f"{condition.name}: {condition.description}" if condition else "error")

    def on_link_error(self, event: Any) -> None:
        condition = event.link.remote_condition
        self.errors.append(f"{condition.name}: {condition.description}" if condition else "error")


class _Timeout:
    def __init__(self, scenario: Scenario, seconds: float) -> None:
        self.scenario, self.seconds = scenario, seconds
        self.fired = False

    def on_timer_task(self, event: Any) -> None:
        self.fired = True
        for connection in self.scenario.connections:
            connection.close()
        event.container.stop()


def run(scenario: Scenario, timeout: float = 30) -> Scenario:
    container = Container(scenario)
    scenario.container = container
    timer = _Timeout(scenario, timeout)
    scenario.timeout_task = container.schedule(timeout, timer)
    container.run()
    if timer.fired:
        raise ScenarioTimeoutError(
            f"{type(scenario).__name__} did not finish within {timeout}s "
            f"(errors: {scenario.errors}); state: {vars(scenario).get('state', '')}"
        )
    return scenario
