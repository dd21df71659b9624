"""Real python-qpid-proton clients for tests: connect as a model user to a vhost.

Scenarios subclass `Scenario` (a MessagingHandler) and call `run(scenario, timeout)`:
the container runs in this thread and a timer fails the test if the scenario does not
finish (close its connections) in time.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proton.handlers import MessagingHandler
from proton.reactor import Container
from proton.utils import BlockingConnection

from enmesh.clients import connect_options


@dataclass(frozen=True)
class Account:
    """Who connects, to which address space, and how."""

    url: str
    identity: str | None  # `user@space`; None for ANONYMOUS
    password: str | None
    vhost: str
    ca: Path | None = None
    mechanisms: str = "SCRAM-SHA-256"

    def connect(self, container: Container) -> Any:
        return container.connect(**self.options())

    def blocking(self, timeout: float = 15) -> BlockingConnection:
        """The same connection as a proton BlockingConnection (request/response tests)."""
        options = self.options()
        del options["reconnect"]  # BlockingConnection sets it itself
        return BlockingConnection(options.pop("url"), timeout=timeout, **options)

    def options(self) -> dict[str, Any]:
        return connect_options(
            self.url,
            user=self.identity,
            password=self.password,
            vhost=self.vhost,
            ca=self.ca,
            mechanisms=self.mechanisms,
        )


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
