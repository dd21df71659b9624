"""Real router meshes for tests: a compiled stack in a temp dir, routers as processes.

Everything the routers run on comes from the compiler (`enmesh.compile`), so the tests
exercise the same files a deployment uses: TLS material from `pki.make_pki`, secrets
as files, a Cyrus sasldb with every model user. Readiness is observed (ports accept,
the metrics endpoint reports the mesh), never slept for.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from enmesh.compile import compile_model, load_stack, write_artefacts
from enmesh.compile.identity import AUTH_COMPONENT
from enmesh.compile.stack import Broker
from enmesh.deploy.sasldb import ensure_sasldb, read_users
from enmesh.model import load_model
from tests.support.pki import make_pki, stack_components
from tests.support.ports import free_port_block, free_port_blocks, port_is_listening

ROOT = Path(__file__).resolve().parents[2]
ROUTER_BIN = Path(sys.executable).parent / "enmesh-router"
SAMPLE_MODEL = ROOT / "stacks" / "iot.model.yml"


def wait_until(
    condition: Callable[[], bool], timeout: float, what: str, interval: float = 0.05
) -> None:
    """Poll `condition` until true or fail after `timeout` seconds, naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def samples(metrics: str, name: str) -> list[tuple[str, int]]:
    """(labels, value) of every sample of the integer metric `name` in Prometheus text."""
    pattern = rf"^{re.escape(name)}\{{([^}}]*)\}} (\d+)$"
    return [(m[1], int(m[2])) for m in re.finditer(pattern, metrics, re.M)]


def reachable_routers_in(metrics: str) -> int:
    """How many other routers a router's /metrics text says it reaches (-1: not said)."""
    found = samples(metrics, "enmesh_router_reachable_routers")
    return found[0][1] if found else -1


@dataclass
class RouterProcess:
    index: int
    config: Path
    log: Path
    amqp_port: int
    amqps_port: int
    metrics_port: int
    process: subprocess.Popen[bytes] | None = None
    admission: Path | None = None  # the compiled auth/admission.json
    wrapper: tuple[str, ...] = ()  # runs the router, e.g. `prlimit --nofile=N:N --`
    options: tuple[str, ...] = ()  # more enmesh-router options, e.g. `--watch-config 1`
    # Another engine on the same config (`BINARY --config FILE`; a qdrouterd for side by
    # side benchmarks: then no admission file nor options, which are enmesh-router's).
    binary: Path = ROUTER_BIN

    def start(self) -> None:
        admission = ["--admission", str(self.admission)] if self.admission else []
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [
                    *self.wrapper,
                    str(self.binary),
                    *("--config", str(self.config), *admission, *self.options),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_until(
            lambda: self._alive_or_fail() and port_is_listening(self.amqp_port),
            20,
            f"router {self.index} to listen on {self.amqp_port}",
        )

    def _alive_or_fail(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(
                f"router {self.index} exited with {self.process.returncode}:\n{self.log_tail()}"
            )
        return True

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.read().decode()

    def reachable_routers(self) -> int:
        try:
            text = self.metrics()
        except OSError:
            return -1
        return reachable_routers_in(text)


@dataclass
class Mesh:
    directory: Path
    routers: list[RouterProcess]
    passwords: dict[str, str]  # SASL identity -> password
    ca: Path
    topology: str
    secrets_dir: Path
    extra: dict[str, object] = field(default_factory=dict)

    def url(self, index: int, tls: bool = False) -> str:
        router = self.routers[index]
        if tls:
            return f"amqps://127.0.0.1:{router.amqps_port}"
        return f"amqp://127.0.0.1:{router.amqp_port}"

    def start(self) -> None:
        for router in self.routers:
            router.start()

    def stop(self) -> None:
        for router in self.routers:
            router.stop()

    def set_secret(self, name: str, key: str, value: str) -> None:
        _write_secret(self.secrets_dir, name, key, value)

    def wait_converged(self, expected: dict[int, int] | None = None, timeout: float = 30) -> None:
        """Wait until router i sees expected[i] other routers (default: all of them)."""
        wanted = expected or {r.index: len(self.routers) - 1 for r in self.routers}
        wait_until(
            lambda: all(self.routers[i].reachable_routers() == n for i, n in wanted.items()),
            timeout,
            f"mesh to converge to {wanted}",
        )


def _write_stack(
    directory: Path,
    *,
    routers: int,
    topology: str,
    models: list[Path],
    broker_port: int,
    link_capacity: int,
    tls: dict[str, object] | None = None,
    security: dict[str, object] | None = None,
    identity: dict[str, object] | None = None,
    name: str = "test",
) -> Path:
    kinds = ("amqp", "amqps", "interRouter", "metrics")
    # The compiler refuses a stack whose listeners share a port: the routers' blocks may
    # not overlap each other nor the broker's (its other ports keep their defaults).
    broker = Broker(name="broker-0", amqpsPort=broker_port)
    taken = frozenset({broker.amqpsPort, broker.mqttsPort, broker.prometheusPort, broker.distPort})
    ports = dict(zip(kinds, free_port_blocks(len(kinds), routers, taken), strict=True))
    model_names = []
    for model in models:
        copy = directory / model.name
        copy.write_text(model.read_text())
        model_names.append(model.name)
    stack = {
        "apiVersion": "enmesh.io/v1",
        "kind": "Stack",
        "metadata": {"name": name},
        "spec": {
            "models": model_names,
            "routers": {
                "count": routers,
                "topology": topology,
                "hosts": ["127.0.0.1"],
                "linkCapacity": link_capacity,
                "ports": {**ports, "stride": 1},
            },
            "brokers": [{"name": "broker-0", "host": "127.0.0.1", "amqpsPort": broker_port}],
            "paths": {
                "config": str(directory / "config"),
                "state": str(directory / "state"),
                "secrets": str(directory / "secrets"),
            },
            **({"tls": tls} if tls is not None else {}),
            **({"security": security} if security is not None else {}),
            **({"identity": identity} if identity is not None else {}),
        },
    }
    path = directory / "test.stack.yml"
    path.write_text(json.dumps(stack))  # JSON is YAML
    return path


def _write_secret(secrets_dir: Path, name: str, key: str, value: str) -> None:
    folder = secrets_dir / name
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / key
    target.write_text(value)
    target.chmod(0o600)


def build_mesh(
    directory: Path,
    *,
    routers: int = 3,
    topology: str = "full-mesh",
    models: list[Path] | None = None,
    broker_port: int | None = None,
    link_capacity: int = 250,
    tls: dict[str, object] | None = None,
    security: dict[str, object] | None = None,
    identity: dict[str, object] | None = None,
    name: str = "test",
) -> Mesh:
    """Compile and provision a stack of `routers` routers; call `start()` to run it.

    `name` is the stack's (its routers are `<name>-router-<i>`; the file stays
    `test.stack.yml`).
    `tls` is the stack's `spec.tls` (TLS policy), if not the default one; `security`
    its `spec.security` (login throttling, handshake limits); `identity` its
    `spec.identity` (with Keycloak the PKI also issues enmesh-auth's certificate, and the
    routers' database holds the administrator alone, as a deployment's does).
    """
    directory.mkdir(parents=True, exist_ok=True)
    broker_port = broker_port or free_port_block(1)  # nothing listens: brokers optional
    stack_file = _write_stack(
        directory,
        routers=routers,
        topology=topology,
        models=models or [SAMPLE_MODEL],
        broker_port=broker_port,
        link_capacity=link_capacity,
        tls=tls,
        security=security,
        identity=identity,
        name=name,
    )
    stack, model_files = load_stack(stack_file)
    model = load_model(model_files)
    artefacts = compile_model(stack, model)
    config_dir = directory / "config"
    write_artefacts(artefacts, config_dir)
    state = directory / "state"
    # proton clients use the open hostname (the tenant) as TLS peer name, so the client
    # listener's certificate names every address space, as a deployment's must.
    tenants = [tenant.name for tenant in model.tenants]
    auth = [AUTH_COMPONENT] if identity is not None else []
    pki = make_pki(
        state / "tls",
        stack_components(routers, ["broker-0"]) + auth,
        hostnames=("localhost", "127.0.0.1", *tenants),
    )
    users = json.loads((config_dir / "auth" / "users.json").read_text())
    passwords: dict[str, str] = {}
    secrets_dir = directory / "secrets"
    for user in users["messagingUsers"]:
        password = secrets.token_urlsafe(12)
        passwords[user["identity"]] = password
        ref = user["passwordSecret"]
        _write_secret(secrets_dir, ref["name"], ref["key"], password)
    admin = users["stackAdministrator"]  # compiled, as every deployment has one
    passwords[admin["identity"]] = secrets.token_urlsafe(12)
    ref = admin["passwordSecret"]
    _write_secret(secrets_dir, ref["name"], ref["key"], passwords[admin["identity"]])
    for service in users["brokerUsers"]:
        ref = service["passwordSecret"]
        _write_secret(secrets_dir, ref["name"], ref["key"], secrets.token_urlsafe(12))
    (state / "auth").mkdir(parents=True, exist_ok=True)
    # As a deployment builds it: with its record of who is in it and each password's
    # digest, so `enmesh apply` sees a changed password (enmesh.deploy.sasldb).
    deployment = json.loads((config_dir / "deploy.json").read_text())
    ensure_sasldb(state / "auth" / "enmesh.sasldb", read_users(deployment, secrets_dir))
    processes = []
    for i, instance_port in enumerate(_ports(stack)):
        amqp, amqps, metrics = instance_port
        processes.append(
            RouterProcess(
                index=i,
                config=config_dir / "routers" / f"{name}-router-{i}.conf",
                log=directory / f"router-{i}.log",
                amqp_port=amqp,
                amqps_port=amqps,
                metrics_port=metrics,
                admission=config_dir / "auth" / "admission.json",
            )
        )
    return Mesh(directory, processes, passwords, pki.ca_cert, topology, secrets_dir, {"pki": pki})


def _ports(stack) -> list[tuple[int, int, int]]:  # type: ignore[no-untyped-def]
    ports = stack.spec.routers.ports
    return [
        (ports.amqp + i, ports.amqps + i, ports.metrics + i)
        for i in range(stack.spec.routers.count)
    ]
