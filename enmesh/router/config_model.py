"""What a router config says, checked: one frozen dataclass per qdrouterd entity.

Field names are the attributes' names in snake_case; defaults are qdrouterd's except
where docs/router.md says otherwise (`mode`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from enmesh.router.failover import FailoverServer
from enmesh.router.policy import DEFAULT_MAX_CONNECTIONS, Vhost


class RouterConfigError(Exception):
    """A problem in a router config or policy file, located as `FILE:LINE: ` or `FILE: `."""


class Mode(StrEnum):
    INTERIOR = "interior"
    STANDALONE = "standalone"


class Role(StrEnum):
    NORMAL = "normal"  # clients
    INTER_ROUTER = "inter-router"  # the mesh
    ROUTE_CONTAINER = "route-container"  # brokers


class Distribution(StrEnum):
    BALANCED = "balanced"
    CLOSEST = "closest"
    MULTICAST = "multicast"
    UNAVAILABLE = "unavailable"


class Direction(StrEnum):
    IN = "in"
    OUT = "out"


class StripAnnotations(StrEnum):
    IN = "in"
    OUT = "out"
    BOTH = "both"
    NO = "no"


@dataclass(frozen=True, kw_only=True)
class Router:
    id: str
    mode: Mode = Mode.INTERIOR
    sasl_config_dir: Path | None = None  # saslConfigDir (saslConfigPath, deprecated, too)
    sasl_config_name: str = "qdrouterd"
    default_distribution: Distribution = Distribution.BALANCED
    allow_unsettled_multicast: bool = False
    metadata: str | None = None
    # A neighbour router silent this long is lost (qdrouterd's HELLO max age): routes go
    # around it while its connection waits for its own idle timeout (enmesh.router.liveness).
    hello_max_age_seconds: int = 3


@dataclass(frozen=True, kw_only=True)
class SslProfile:
    name: str
    ca_cert_file: Path | None = None
    cert_file: Path | None = None
    private_key_file: Path | None = None
    password: str | None = None  # a reference as written; see `resolve_password`
    protocols: str | None = None  # None: TLS 1.2 and 1.3 (see tls_policy)
    ciphers: str | None = None


@dataclass(frozen=True, kw_only=True)
class AuthServicePlugin:
    """qdrouterd's authServicePlugin: a listener naming it (`saslPlugin`) hands each
    client's SASL exchange to this AMQP authentication service (enmesh.router.saslrelay)."""

    name: str
    host: str = ""
    port: int = 5672
    realm: str | None = None  # the sasl-init hostname sent to the service
    ssl_profile: str | None = None
    auth_service: str | None = None  # deprecated `host:port`, used when host is not set

    def address(self) -> tuple[str, int]:
        if self.host or not self.auth_service:
            return self.host or "127.0.0.1", self.port
        host, _, port = self.auth_service.rpartition(":")
        return host or "127.0.0.1", int(port)


@dataclass(frozen=True, kw_only=True)
class Endpoint:
    """What listeners and connectors share."""

    host: str = "127.0.0.1"
    port: int
    role: Role = Role.NORMAL
    ssl_profile: str | None = None
    sasl_mechanisms: tuple[str, ...] = ()
    link_capacity: int = 250
    idle_timeout_seconds: int = 16  # 0: no idle timeout
    max_frame_size: int = 16384
    max_sessions: int = 32768
    max_session_frames: int = 0  # 0: unbounded (enmesh.router.session_window)
    strip_annotations: StripAnnotations = StripAnnotations.BOTH


@dataclass(frozen=True, kw_only=True)
class Listener(Endpoint):
    name: str | None = None
    authenticate_peer: bool = False
    sasl_plugin: str | None = None  # an authServicePlugin's name
    multi_tenant: bool = False
    require_ssl: bool = False
    http: bool = False
    # qdrouterd's default is 0 (no limit); a peer that never sends its open must not hold
    # a descriptor for ever, so enmesh-router's is 10 s. 0 still disables it.
    initial_handshake_timeout_seconds: int = 10
    metrics: bool = True
    healthz: bool = True
    websockets: bool = True
    failover_urls: str | None = None  # as written (management reports it so)
    failover_servers: tuple[FailoverServer, ...] = ()  # parsed by config_checks.listener


@dataclass(frozen=True, kw_only=True)
class Connector(Endpoint):
    name: str  # qdrouterd's `connector/HOST:PORT` when the config gives none
    verify_hostname: bool = True
    sasl_username: str | None = None
    sasl_password: str | None = None  # a reference as written; see `resolve_password`


@dataclass(frozen=True, kw_only=True)
class Log:
    module: str
    enable: str | None = None
    output_file: str | None = None


@dataclass(frozen=True, kw_only=True)
class Policy:
    enable_vhost_policy: bool = False
    policy_dir: Path | None = None
    max_connections: int = DEFAULT_MAX_CONNECTIONS


@dataclass(frozen=True, kw_only=True)
class Address:
    name: str | None = None
    prefix: str | None = None
    pattern: str | None = None
    distribution: Distribution = Distribution.BALANCED
    waypoint: bool = False
    ingress_phase: int | None = None  # as written; (0, 1) is a waypoint's phasing
    egress_phase: int | None = None


@dataclass(frozen=True, kw_only=True)
class LinkRoute:
    name: str | None = None
    prefix: str | None = None
    pattern: str | None = None
    direction: Direction
    connection: str | None = None  # exactly one of connection and container_id
    container_id: str | None = None
    add_external_prefix: str | None = None
    del_external_prefix: str | None = None


@dataclass(frozen=True, kw_only=True)
class AutoLink:
    name: str | None = None
    address: str
    direction: Direction
    connection: str | None = None  # exactly one of connection and container_id
    container_id: str | None = None
    external_address: str
    phase: int


@dataclass(frozen=True, kw_only=True)
class RouterConfig:
    """One router's config, checked: every entity tuple is in file order."""

    router: Router
    ssl_profiles: tuple[SslProfile, ...] = ()
    auth_service_plugins: tuple[AuthServicePlugin, ...] = ()
    listeners: tuple[Listener, ...] = ()
    connectors: tuple[Connector, ...] = ()
    logs: tuple[Log, ...] = ()
    policy: Policy | None = None
    vhosts: tuple[Vhost, ...] = ()  # inline first, then policyDir files by name
    addresses: tuple[Address, ...] = ()
    link_routes: tuple[LinkRoute, ...] = ()
    auto_links: tuple[AutoLink, ...] = ()
    # `FILE:LINE: entity: attribute: ignored: why`, one per setting accepted without effect.
    warnings: tuple[str, ...] = ()

    def ssl_profile(self, name: str) -> SslProfile:
        """A profile that a listener or connector names (checked when loading)."""
        return next(p for p in self.ssl_profiles if p.name == name)

    def auth_service_plugin(self, name: str) -> AuthServicePlugin:
        """The plugin a listener's saslPlugin names (checked when loading)."""
        return next(p for p in self.auth_service_plugins if p.name == name)

    def connection(self, name: str) -> Listener | Connector:
        """The listener or connector a linkRoute or autoLink names (checked when loading)."""
        connections: tuple[Listener | Connector, ...] = (*self.connectors, *self.listeners)
        return next(c for c in connections if c.name == name)

    def vhost(self, hostname: str) -> Vhost | None:
        """The policy for the address space a client names in its AMQP open `hostname`."""
        return next((v for v in self.vhosts if v.hostname == hostname), None)
