"""The config table's entities for the router and its connections: router, sslProfile,
listener, connector (see `config_schema`)."""

from __future__ import annotations

from enmesh.router import config_checks as checks
from enmesh.router import config_values as v
from enmesh.router.config_model import (
    AuthServicePlugin,
    Connector,
    Distribution,
    Listener,
    Mode,
    Role,
    Router,
    SslProfile,
    StripAnnotations,
)
from enmesh.router.config_schema_base import (
    IGNORE,
    IMPL,
    LOGS_ONLY,
    NAME,
    ONLY_DEFAULT,
    REFUSE,
    Attribute,
    EntityType,
    ignored_name,
)
from enmesh.router.config_schema_base import attr as _a
from enmesh.router.tls_policy import parse_ciphers, parse_protocols

_MESH_TIMER = (
    "a timer of qdrouterd's HELLO/RA protocol; enmesh routers advertise on every change "
    "and notice a lost neighbour by its connection's silence (helloMaxAgeSeconds)"
)

ROUTER = EntityType(
    "router",
    "org.apache.qpid.dispatch.router",
    (
        ignored_name("router"),
        _a("id", "string", IMPL, "the router's name in the mesh"),
        _a(
            "mode",
            "enum (standalone|interior|edge)",
            IMPL,
            "interior and standalone behave alike; enmesh's default is interior",
            default="standalone",
            convert=v.choice(
                Mode,
                {
                    "edge": "an edge router joins the mesh through an uplink "
                    "to interior routers, with its own protocol"
                },
            ),
        ),
        _a(
            "helloIntervalSeconds",
            "integer",
            IGNORE,
            _MESH_TIMER,
            default="1",
            aliases=("helloInterval",),
        ),
        _a(
            "helloMaxAgeSeconds",
            "integer",
            IMPL,
            "a neighbour router silent this long is lost and routes go around it; its "
            "connection stays open until the listener's or connector's idle timeout, so a "
            "neighbour that only paused fails no message in flight (inter-router connections "
            "advertise this as their idle timeout: each side sends a frame every half of it); "
            "also how long a router keeps what it holds for a destination it hears is lost "
            "before giving it back upstream (a path that only flapped fails nothing)",
            default="3",
            convert=v.integer(1),
            aliases=("helloMaxAge",),
        ),
        _a(
            "raIntervalSeconds",
            "integer",
            IGNORE,
            _MESH_TIMER,
            default="30",
            aliases=("raInterval",),
        ),
        _a(
            "raIntervalFluxSeconds",
            "integer",
            IGNORE,
            _MESH_TIMER,
            default="4",
            aliases=("raIntervalFlux",),
        ),
        _a(
            "remoteLsMaxAgeSeconds",
            "integer",
            IGNORE,
            _MESH_TIMER,
            default="60",
            aliases=("remoteLsMaxAge",),
        ),
        _a(
            "workerThreads",
            "integer",
            IGNORE,
            "one event loop per process; scale out by adding routers",
            default="4",
        ),
        _a(
            "debugDumpFile",
            "path",
            IGNORE,
            "qdrouterd's allocator dump; nothing a client sees",
            aliases=("debugDump",),
        ),
        _a(
            "saslConfigDir",
            "path",
            IMPL,
            "Cyrus SASL configuration directory",
            aliases=("saslConfigPath",),
        ),
        _a("saslConfigName", "string", IMPL, "Cyrus SASL application name", default="qdrouterd"),
        _a(
            "allowResumableLinkRoute",
            "boolean",
            ONLY_DEFAULT,
            "false would refuse link-routed links with durable termini",
            default="true",
        ),
        _a("timestampsInUTC", "boolean", IGNORE, "log format; JSON log lines carry UTC times"),
        _a("timestampFormat", "string", IGNORE, "log format; JSON log lines carry ISO 8601 times"),
        _a(
            "allowUnsettledMulticast",
            "boolean",
            IGNORE,
            "deprecated in qdrouterd 1.19, which reads it nowhere: unsettled multicast always "
            "settles end to end (each copy unsettled; the sender's delivery once every copy "
            "is, rejected > accepted > modified > released)",
            default="false",
        ),
        _a(
            "defaultDistribution",
            "enum (multicast|closest|balanced|unavailable)",
            IMPL,
            "distribution of addresses no `address` entity matches",
            default="balanced",
            convert=v.choice(Distribution),
        ),
        _a("metadata", "string", IMPL, "free text, reported by management"),
    ),
    Router,
    "the router itself",
    required=("id",),
    check=checks.router,
    singleton=True,
)

SSL_PROFILE = EntityType(
    "sslProfile",
    "org.apache.qpid.dispatch.sslProfile",
    (
        NAME,
        _a(
            "ciphers",
            "string",
            IMPL,
            "TLS 1.2 cipher list (OpenSSL syntax)",
            convert=lambda raw: parse_ciphers(v.text(raw)),
        ),
        _a(
            "protocols",
            "string",
            IMPL,
            "TLS versions allowed",
            convert=lambda raw: parse_protocols(v.text(raw)),
        ),
        _a("caCertFile", "path", IMPL, "CA certificates to verify peers with", aliases=("certDb",)),
        _a("certFile", "path", IMPL, "own certificate"),
        _a("privateKeyFile", "path", IMPL, "own private key", aliases=("keyFile",)),
        _a(
            "passwordFile", "path", IMPL, "file holding the key's password (as password: file:PATH)"
        ),
        _a("password", "string", IMPL, "the key's password: file:PATH, env:NAME or pass:TEXT"),
        _a(
            "uidFormat",
            "string",
            REFUSE,
            "would take an authenticated user name from the client certificate's fields",
        ),
        _a(
            "uidNameMappingFile",
            "string",
            REFUSE,
            "would map certificate user names to display names",
            aliases=("displayNameFile",),
        ),
    ),
    SslProfile,
    "TLS settings that listeners and connectors name",
    required=("name",),
    check=checks.ssl_profile,
)

AUTH_SERVICE_PLUGIN = EntityType(
    "authServicePlugin",
    "org.apache.qpid.dispatch.authServicePlugin",
    (
        NAME,
        _a("host", "string", IMPL, "host of the authentication service (enmesh-auth)", default=""),
        _a("port", "string", IMPL, "its port, or amqp / amqps", default="amqp", convert=v.port),
        _a(
            "realm",
            "string",
            IMPL,
            "hostname sent in the sasl-init to the service",
            aliases=("saslInitHostname",),
        ),
        _a(
            "sslProfile",
            "string",
            IMPL,
            "TLS to the service: its caCertFile verifies the service's certificate",
            aliases=("authSslProfile",),
        ),
        _a("authService", "string", IMPL, "deprecated HOST:PORT, used when host is not set"),
    ),
    AuthServicePlugin,
    "an AMQP service that authenticates a listener's clients (the listener's saslPlugin)",
    required=("name",),
)

_FAMILY = "would choose IPv4 or IPv6 for `host`; enmesh-router uses what `host` resolves to"


def _endpoint(role_default: str) -> tuple[Attribute, ...]:
    """Attributes listeners and connectors share, in qdrouterd's order."""
    return (
        _a(
            "role",
            "enum (normal|inter-router|route-container|edge)",
            IMPL,
            "clients, the mesh, or brokers",
            default=role_default,
            convert=v.choice(Role, {"edge": "edge routers are not supported (see router mode)"}),
        ),
        _a(
            "cost",
            "integer",
            ONLY_DEFAULT,
            "other values would weigh this inter-router link in path "
            "choice; enmesh-router counts hops",
            default="1",
        ),
        _a("sslProfile", "string", IMPL, "TLS from this sslProfile"),
        _a(
            "saslMechanisms",
            "string",
            IMPL,
            "SASL mechanisms offered, space separated",
            convert=v.words,
        ),
        _a(
            "maxFrameSize",
            "integer",
            IMPL,
            "largest AMQP frame (proton's minimum is 512)",
            default="16384",
            convert=v.integer(512),
        ),
        _a(
            "maxSessions",
            "integer",
            IMPL,
            "sessions per connection (channel-max + 1)",
            default="32768",
            convert=v.integer(1, 32768),
        ),
        _a(
            "maxSessionFrames",
            "integer",
            IMPL,
            "bounds each session's incoming window to this many frames (0: unbounded)",
            default="0",
            convert=v.integer(0, 2**31 - 1),
        ),
        _a(
            "idleTimeoutSeconds",
            "integer",
            IMPL,
            "a peer silent this long is dropped; 0: never",
            default="16",
        ),
        _a(
            "stripAnnotations",
            "enum (in|out|both|no)",
            IMPL,
            "the router's x-opt-qd annotations: in: ignored coming in; out: removed going "
            "out; both; no: kept both ways (inter-router connections never strip)",
            default="both",
            convert=v.choice(StripAnnotations),
        ),
        _a("linkCapacity", "integer", IMPL, "credit per link", convert=v.integer(1)),
        _a(
            "messageLoggingComponents",
            "string",
            IGNORE,
            LOGS_ONLY,
            default="none",
            aliases=("logMessage",),
        ),
        _a(
            "policyVhost",
            "string",
            REFUSE,
            "would apply this vhost's policy to every connection, whatever its hostname",
        ),
        _a(
            "openProperties",
            "properties",
            REFUSE,
            "would add these to the open frame's properties",
            convert=v.json_object,
        ),
    )


_COMMON = (
    _a("host", "string", IMPL, "address to listen on or connect to", default="127.0.0.1"),
    _a("port", "string", IMPL, "port number, or amqp / amqps", default="amqp", convert=v.port),
)

LISTENER = EntityType(
    "listener",
    "org.apache.qpid.dispatch.listener",
    (
        NAME,
        *_COMMON,
        _a("socketAddressFamily", "enum (IPv4|IPv6)", REFUSE, _FAMILY, aliases=("protocolFamily",)),
        *_endpoint("normal"),
        _a("authenticatePeer", "boolean", IMPL, "clients must authenticate", default="false"),
        _a(
            "saslPlugin",
            "string",
            IMPL,
            "the authServicePlugin that authenticates this listener's clients",
        ),
        _a(
            "requireEncryption",
            "boolean",
            ONLY_DEFAULT,
            "true would refuse unencrypted connections (requireSsl does, for TLS)",
            default="false",
        ),
        _a("requireSsl", "boolean", IMPL, "refuse connections without TLS", default="false"),
        _a(
            "trustedCertsFile",
            "path",
            REFUSE,
            "would accept client certificates signed by these CAs only",
            aliases=("trustedCerts",),
        ),
        _a(
            "initialHandshakeTimeoutSeconds",
            "integer",
            IMPL,
            "a connection that has not opened in this time is dropped; 0: never "
            "(enmesh-router's default is 10 s, so a silent peer cannot hold a descriptor)",
            default="0",
        ),
        _a(
            "multiTenant",
            "boolean",
            IMPL,
            "the open frame's hostname selects the vhost",
            default="false",
        ),
        _a(
            "failoverUrls",
            "string",
            IMPL,
            "`[(amqp|amqps|ws|wss)://]host[:port]`, comma-separated: sent to this listener's "
            "clients in the open frame's `failover-server-list`, where to reconnect",
            aliases=("failoverList",),
        ),
        _a("healthz", "boolean", IMPL, "GET /healthz answers on http listeners", default="true"),
        _a("metrics", "boolean", IMPL, "GET /metrics answers on http listeners", default="true"),
        _a(
            "websockets",
            "boolean",
            IMPL,
            "AMQP over WebSocket: not served, so an http listener must set websockets: false",
            default="true",
        ),
        _a("http", "boolean", IMPL, "serve HTTP (metrics) instead of AMQP", default="false"),
        _a(
            "httpRootDir",
            "path",
            REFUSE,
            "would serve the web console's files",
            aliases=("httpRoot",),
        ),
    ),
    Listener,
    "an address the router listens on",
    required=("port",),
    check=checks.listener,
)

CONNECTOR = EntityType(
    "connector",
    "org.apache.qpid.dispatch.connector",
    (
        NAME,
        *_COMMON,
        _a("protocolFamily", "enum (IPv4|IPv6)", REFUSE, _FAMILY),
        *_endpoint("normal"),
        _a(
            "allowRedirect",
            "boolean",
            IGNORE,
            "enmesh-router retries the configured address "
            "instead of following a peer's redirect; no client connection is affected",
            default="true",
        ),
        _a(
            "verifyHostname",
            "boolean",
            IMPL,
            "check the peer certificate's name",
            default="true",
            aliases=("verifyHostName",),
        ),
        _a("saslUsername", "string", IMPL, "user to authenticate as"),
        _a("saslPassword", "string", IMPL, "its password: file:PATH, env:NAME or pass:TEXT"),
    ),
    Connector,
    "a peer the router connects to, retried with backoff",
    required=("port",),
    check=checks.connector,
)
