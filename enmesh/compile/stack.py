"""A stack: which model files to deploy and the topology that serves them.

`stacks/<name>.stack.yml` is one `Stack` document. It holds no secrets: passwords are
read at deploy time from `<paths.secrets>/<secret>/<key>` (the layout of a mounted
Kubernetes Secret), so the same compiled files work on hosts and in pods.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, StringConstraints, model_validator

from enmesh.compile.admission import SecurityPolicy
from enmesh.compile.bridge import Bridge, read_bridges
from enmesh.compile.engines import Engine
from enmesh.compile.fields import AbsolutePath, Port, StackName
from enmesh.compile.fields import Strict as _Strict
from enmesh.model.problems import ModelInvalidError, Problem
from enmesh.model.schema import validate_as
from enmesh.model.source import load_documents


class MeshTopology(StrEnum):
    FULL_MESH = "full-mesh"  # every router connects to every other one
    CHAIN = "chain"  # router i connects to router i-1
    RING = "ring"  # a chain closed back to router 0


class RouterPorts(_Strict):
    amqp: Port = 5672  # SCRAM only: no cleartext passwords without TLS
    amqps: Port = 5671
    interRouter: Port = 55671  # noqa: N815
    metrics: Port = 9090
    stride: Annotated[int, Field(strict=True, ge=1, le=1000)] = 10  # next router on same host


class Routers(_Strict):
    # The router that runs the configs: they are compiled for and checked against it.
    engine: Engine = Engine.ENMESH_ROUTER
    count: Annotated[int, Field(strict=True, ge=1, le=64)] = 3
    topology: MeshTopology = MeshTopology.FULL_MESH
    hosts: list[str] = Field(default_factory=lambda: ["127.0.0.1"], min_length=1)
    ports: RouterPorts = Field(default_factory=RouterPorts)
    linkCapacity: Annotated[int, Field(strict=True, ge=1)] = 250  # noqa: N815
    # Kubernetes: routers bind every interface of their pod while peers reach them by
    # the pod's DNS name (`hosts`); clients may use further names (load balancer, DNS).
    listenHost: str | None = None  # noqa: N815
    clientDnsNames: list[str] = Field(default_factory=list)  # noqa: N815


MIN_CLUSTER_NODES = 3


class PeerDiscovery(_Strict):
    """RabbitMQ nodes of one broker find each other through a headless Kubernetes Service."""

    service: str
    namespace: str
    clusterDomain: str = "cluster.local"  # noqa: N815


class Broker(_Strict):
    name: Annotated[str, StringConstraints(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]
    host: str = "127.0.0.1"
    amqpsPort: Port = 25671  # noqa: N815
    mqttsPort: Port = 28883  # noqa: N815  (MQTT over TLS; 1883/8883 are the gateway's)
    prometheusPort: Port = 15692  # noqa: N815
    distPort: Port = 25672  # noqa: N815  (Erlang distribution: loopback unless clustered)
    listenHost: str | None = None  # noqa: N815  (bind address; default: host)
    peerDiscovery: PeerDiscovery | None = None  # noqa: N815  (a RabbitMQ cluster on Kubernetes)
    # A RabbitMQ cluster on hosts: one node on each host listed (`host` is the first).
    # Routers connect to every node; quorum queues keep a replica on each.
    nodes: list[str] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _host_of_cluster(cls, data: object) -> object:
        if isinstance(data, dict) and data.get("nodes") and "host" not in data:
            return {**data, "host": data["nodes"][0]}
        return data

    @model_validator(mode="after")
    def _cluster_on_hosts(self) -> Broker:
        if not self.nodes:
            return self
        if len(self.nodes) < MIN_CLUSTER_NODES:
            raise ValueError(
                f"nodes: a RabbitMQ cluster needs at least {MIN_CLUSTER_NODES} hosts, so "
                f"that quorum queues keep a majority when one is lost; got {len(self.nodes)}"
            )
        repeated = sorted({n for n in self.nodes if self.nodes.count(n) > 1})
        if repeated:
            raise ValueError(f"nodes: one node per host; repeated: {', '.join(repeated)}")
        if self.host != self.nodes[0]:
            raise ValueError(f"host: a cluster's host is its first node ({self.nodes[0]})")
        if self.peerDiscovery is not None or self.listenHost is not None:
            raise ValueError(
                "nodes: a cluster on hosts has no peerDiscovery (Kubernetes) and no "
                "listenHost (each node listens on its own host)"
            )
        return self


class TlsVersion(StrEnum):
    TLS_1_2 = "1.2"
    TLS_1_3 = "1.3"


# TLS 1.2 suites offered by default: forward secrecy and AEAD only, so no CBC-SHA1 (RSA
# key exchange, Lucky13-style padding oracles). TLS 1.3 suites are all AEAD; every
# component offers its defaults for those (see enmesh.compile.tls).
DEFAULT_TLS12_CIPHERS = (
    "ECDHE-ECDSA-AES256-GCM-SHA384",
    "ECDHE-RSA-AES256-GCM-SHA384",
    "ECDHE-ECDSA-CHACHA20-POLY1305",
    "ECDHE-RSA-CHACHA20-POLY1305",
    "ECDHE-ECDSA-AES128-GCM-SHA256",
    "ECDHE-RSA-AES128-GCM-SHA256",
)
CipherName = Annotated[str, StringConstraints(pattern=r"^[A-Z0-9][A-Z0-9-]*[A-Z0-9]$")]


class TlsPolicy(_Strict):
    """Every TLS endpoint of the stack: routers (client, inter-router, to brokers), brokers."""

    minVersion: TlsVersion = TlsVersion.TLS_1_2  # noqa: N815
    # OpenSSL names of the TLS 1.2 suites, in order of preference.
    ciphers: list[CipherName] = Field(
        default_factory=lambda: list(DEFAULT_TLS12_CIPHERS), min_length=1
    )


Duration = Annotated[str, StringConstraints(pattern=r"^[0-9]+(ms|s|m|h|d|w|y)$")]


class Prometheus(_Strict):
    """The stack's Prometheus (Debian's package, supervised on the stack host)."""

    enabled: bool = True
    host: str | None = None  # where it listens; default: the first router's host
    port: Port = 9190  # not 9090: the first router's metrics listener has that one
    scrapeInterval: Duration = "15s"  # noqa: N815
    retention: Duration = "15d"


class Alerts(_Strict):
    """Thresholds of the alerting rules."""

    queueDepth: Annotated[int, Field(strict=True, ge=1)] = 10000  # noqa: N815  (messages)
    deadLetterWindow: Duration = "10m"  # noqa: N815  (a DLQ growing over this window)
    routerDownFor: Duration = "1m"  # noqa: N815


class Monitoring(_Strict):
    prometheus: Prometheus = Field(default_factory=Prometheus)
    alerts: Alerts = Field(default_factory=Alerts)


ListenerPort = Annotated[int, Field(strict=True, ge=0, le=65535)]  # 0: no such listener


class MqttPorts(_Strict):
    mqtt: ListenerPort = 1883  # MQTT over TCP
    mqtts: ListenerPort = 8883  # MQTT over TLS (the routers' client certificate)
    ws: ListenerPort = 8083  # MQTT over WebSocket
    wss: ListenerPort = 8084  # MQTT over WebSocket and TLS


class Mqtt(_Strict):
    """The MQTT gateway on each host with routers: devices enter through the mesh."""

    enabled: bool = True
    ports: MqttPorts = Field(default_factory=MqttPorts)

    @model_validator(mode="after")
    def _some_listener(self) -> Mqtt:
        if self.enabled and not any(self.ports.model_dump().values()):
            raise ValueError("an enabled MQTT gateway needs at least one port other than 0")
        return self


class Console(_Strict):
    """The web console (enmesh-console): on the deployer's host, for a stack on one host."""

    enabled: bool | None = None  # default: on when every router and broker is on one host
    host: str | None = None  # where it listens; default: the first router's host
    port: Port = 8443  # HTTPS


class IdentityProvider(StrEnum):
    SASLDB = "sasldb"  # the routers' Cyrus SASL database, built from the model's users
    KEYCLOAK = "keycloak"  # enmesh-auth asks Keycloak (the routers' authServicePlugin)


class AuthService(_Strict):
    """enmesh-auth: the routers relay each client's SASL exchange to it over AMQPS."""

    host: str | None = None  # where it listens; default: the first router's host
    port: Port = 5679  # beside the first router's amqp/amqps ports (5672, 5671)


class Keycloak(_Strict):
    """The Keycloak enmesh-auth asks (realm `enmesh`, built from the model)."""

    host: str | None = None  # default: the auth service's host
    port: Port = 8453  # HTTPS (8443 is the console's)
    managementPort: Port = 8454  # noqa: N815  (health, HTTPS)
    databasePort: Port = 5442  # noqa: N815  (its PostgreSQL, on loopback)


class Identity(_Strict):
    """Who checks messaging users' passwords and rights (docs/identity.md)."""

    provider: IdentityProvider = IdentityProvider.SASLDB
    authService: AuthService = Field(default_factory=AuthService)  # noqa: N815
    keycloak: Keycloak = Field(default_factory=Keycloak)


class StackPaths(_Strict):
    config: AbsolutePath = "/etc/enmesh"  # where the rendered files are installed
    state: AbsolutePath = "/var/lib/enmesh"  # TLS material, SASL database
    secrets: AbsolutePath = "/etc/enmesh/secrets"  # <secret>/<key> files, mode 0600
    # The runtime part of the desired state, on the machine that renders the stack
    # (default <state>/runtime). A site is rendered on its deployer, beside other stacks
    # that may share `state`: it names a deployer directory of its own.
    runtime: AbsolutePath | None = None


class StackSpec(_Strict):
    models: list[str] = Field(min_length=1)  # model files, relative to the stack file
    routers: Routers = Field(default_factory=Routers)
    brokers: list[Broker] = Field(min_length=1)
    paths: StackPaths = Field(default_factory=StackPaths)
    security: SecurityPolicy = Field(default_factory=SecurityPolicy)  # throttling, limits
    tls: TlsPolicy = Field(default_factory=TlsPolicy)
    monitoring: Monitoring = Field(default_factory=Monitoring)  # Prometheus, alerts
    mqtt: Mqtt = Field(default_factory=Mqtt)  # the MQTT gateway's listeners
    console: Console = Field(default_factory=Console)  # the web console
    identity: Identity = Field(default_factory=Identity)  # sasldb, or Keycloak via enmesh-auth
    # Other stacks' meshes joined to this one (enmesh.compile.bridge); `enmesh migrate
    # bridge` adds its bridges to the runtime part instead.
    bridges: list[Bridge] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique_broker_names(self) -> StackSpec:
        names = [b.name for b in self.brokers]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"broker names must be unique; repeated: {', '.join(duplicates)}")
        return self


class Stack(_Strict):
    apiVersion: Literal["enmesh.io/v1"]  # noqa: N815
    kind: Literal["Stack"]
    metadata: dict[Literal["name"], StackName]
    spec: StackSpec

    @property
    def name(self) -> str:
        return self.metadata["name"]


def load_stack(path: Path) -> tuple[Stack, list[Path]]:
    """Read a stack file; returns it and its model files resolved next to it."""
    documents, problems = load_documents(path)
    if not problems and len(documents) != 1:
        problems = [
            Problem(str(path), 1, 1, "", "", "a stack file holds exactly one Stack document")
        ]
    stack = None
    if not problems:
        stack, problems = validate_as(documents[0], Stack)
    if stack is None:
        raise ModelInvalidError(problems)
    stack = _with_runtime_bridges(stack)
    return stack, [path.parent / model for model in stack.spec.models] + runtime_models(stack)


def _with_runtime_bridges(stack: Stack) -> Stack:
    added = read_bridges(runtime_dir(stack))
    if not added:
        return stack
    spec = stack.spec.model_copy(update={"bridges": [*stack.spec.bridges, *added]})
    return stack.model_copy(update={"spec": spec})


def runtime_dir(stack: Stack) -> Path:
    """The runtime part of the desired state (DESIGN.md, "The control plane"): model
    documents added while the stack runs (the console), kept beside its state, so `enmesh
    apply` and the next `make up` keep them. They only add to the files in git."""
    paths = stack.spec.paths
    return Path(paths.runtime) if paths.runtime is not None else Path(paths.state) / "runtime"


def runtime_models(stack: Stack) -> list[Path]:
    folder = runtime_dir(stack)
    return sorted(folder.glob("*.model.yml")) if folder.is_dir() else []


def find_stack_file(name: str, stacks_dir: Path) -> Path:
    """`stacks/<name>.stack.yml`; a path to a file is accepted as is."""
    candidate = Path(name)
    if candidate.suffix in {".yml", ".yaml"} and candidate.is_file():
        return candidate
    found = stacks_dir / f"{name}.stack.yml"
    if not found.is_file():
        known = sorted(p.name.removesuffix(".stack.yml") for p in stacks_dir.glob("*.stack.yml"))
        raise FileNotFoundError(
            f"no stack {name!r}: {found} does not exist "
            f"(known stacks: {', '.join(known) or 'none'})"
        )
    return found
