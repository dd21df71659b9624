"""TLS and SASL for the router's transports, from sslProfile / listener / connector config.

SASL goes through Cyrus (python-qpid-proton built against libsasl2): the router entity
names the Cyrus configuration (`saslConfigPath`/`saslConfigName`), which points at the
sasldb built from the model's users. ANONYMOUS is offered only when a listener lists it.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

import cproton  # type: ignore[import-untyped]
from proton import SASL, SSL, Connection, SSLDomain, SSLException, Transport

from enmesh.router import tls_policy


@dataclass(frozen=True)
class TlsFiles:
    ca_cert_file: str | None
    cert_file: str | None
    private_key_file: str | None
    password: str | None = None
    protocols: str | None = None  # sslProfile `protocols`; None: tls_policy's defaults
    ciphers: str | None = None


@dataclass(frozen=True)
class SaslSettings:
    config_path: str | None
    config_name: str


def restrict(domain: SSLDomain, tls: TlsFiles) -> None:
    """Offer only the profile's TLS versions and cipher suites (or the router's defaults)."""
    # python-qpid-proton 0.40 binds these two in cproton but its SSLDomain has no method
    # for them. proton keeps its own cipher list only while none was set, so the order
    # relative to set_credentials does not matter.
    native = domain._domain
    protocols = tls.protocols or tls_policy.DEFAULT_PROTOCOLS
    if cproton.pn_ssl_domain_set_protocols(native, protocols):
        raise SSLException(f"TLS protocols {protocols!r} not accepted by proton")
    ciphers = tls.ciphers or tls_policy.DEFAULT_CIPHERS
    if cproton.pn_ssl_domain_set_ciphers(native, ciphers):
        raise SSLException(f"TLS ciphers {ciphers!r} not accepted by OpenSSL")


def first_bytes_screen(require_tls: bool) -> Callable[[bytes], str | None] | None:
    """What a listener's connections check their first bytes with (see tls_policy)."""
    return tls_policy.refuse_unless_tls if require_tls else None


FileStamp = tuple[tuple[int, int, int], ...]


def files_stamp(tls: TlsFiles) -> FileStamp:
    """What changes when any of the profile's files is replaced or rewritten (renewal):
    the key that decides whether a TLS context built earlier still holds."""
    stamps = []
    for path in (tls.ca_cert_file, tls.cert_file, tls.private_key_file):
        try:
            status = Path(path).stat() if path else None
        except OSError:  # missing now: building the context says which file and why
            status = None
        stamps.append((status.st_ino, status.st_size, status.st_mtime_ns) if status else (0, 0, 0))
    return tuple(stamps)


CACHED_VERSIONS = 32  # per builder: every profile and option in use, and then some
_P = ParamSpec("_P")
_Built = TypeVar("_Built")


def per_files_version(
    build: Callable[Concatenate[TlsFiles, _P], _Built],
) -> Callable[Concatenate[TlsFiles, _P], _Built]:
    """`build(tls, ...)` made once per version of the profile's files, not per connection:
    building a TLS context reads and parses the certificate, key and CA (~17 ms), which per
    accepted connection capped a router at a few dozen TLS connections/s. A renewed file
    (files_stamp) builds a new one, so the next connection presents the new certificate
    while established ones carry on."""

    # The stamp is part of the key: a renewed file's older versions age out of the LRU.
    cached: Callable[..., _Built] = functools.lru_cache(maxsize=CACHED_VERSIONS)(
        lambda _stamp, tls, *args, **kwargs: build(tls, *args, **kwargs)
    )

    @functools.wraps(build)
    def built(tls: TlsFiles, /, *args: _P.args, **kwargs: _P.kwargs) -> _Built:
        return cached(files_stamp(tls), tls, *args, **kwargs)

    return built


@per_files_version
def server_domain(tls: TlsFiles, require_peer_certificate: bool, require_tls: bool) -> SSLDomain:
    """A listener's proton TLS domain."""
    domain = SSLDomain(SSLDomain.MODE_SERVER)
    restrict(domain, tls)
    if tls.cert_file and tls.private_key_file:
        domain.set_credentials(tls.cert_file, tls.private_key_file, tls.password)
    if tls.ca_cert_file:
        domain.set_trusted_ca_db(tls.ca_cert_file)
        if require_peer_certificate:  # inter-router: mutual TLS, SASL EXTERNAL
            domain.set_peer_authentication(SSLDomain.VERIFY_PEER, tls.ca_cert_file)
    if not require_tls:
        domain.allow_unsecured_client()
    return domain


@per_files_version
def client_domain(tls: TlsFiles, verify_hostname: bool) -> SSLDomain:
    """A connector's proton TLS domain."""
    domain = SSLDomain(SSLDomain.MODE_CLIENT)
    restrict(domain, tls)
    if tls.cert_file and tls.private_key_file:
        domain.set_credentials(tls.cert_file, tls.private_key_file, tls.password)
    if tls.ca_cert_file:
        domain.set_trusted_ca_db(tls.ca_cert_file)
    domain.set_peer_authentication(
        SSLDomain.VERIFY_PEER_NAME if verify_hostname else SSLDomain.VERIFY_PEER
    )
    return domain


@per_files_version
def client_context(tls: TlsFiles) -> ssl.SSLContext:
    """Python's TLS, for a connection the router speaks by hand (the auth service):
    verifies the peer's certificate and name with the profile's CA."""
    context = ssl.create_default_context(cafile=tls.ca_cert_file)
    if tls.cert_file and tls.private_key_file:
        context.load_cert_chain(tls.cert_file, tls.private_key_file, tls.password)
    return context


def relayed_transport() -> Transport:
    """A client transport whose SASL the router relays itself (enmesh.router.saslrelay):
    proton sees only the AMQP layer, once SASL is over."""
    transport = Transport(Transport.SERVER)
    transport.require_auth(False)
    return transport


def _configure_sasl(transport: Transport, mechanisms: tuple[str, ...], sasl: SaslSettings) -> SASL:
    layer = transport.sasl()
    if sasl.config_path:
        layer.config_path(sasl.config_path)
    layer.config_name(sasl.config_name)
    if mechanisms:
        layer.allowed_mechs(" ".join(mechanisms))
    return layer


def server_transport(
    mechanisms: tuple[str, ...],
    authenticate_peer: bool,
    sasl: SaslSettings,
    domain: SSLDomain | None,
) -> Transport:
    transport = Transport(Transport.SERVER)
    if domain is not None:
        SSL(transport, domain)
    _configure_sasl(transport, mechanisms, sasl)
    transport.require_auth(authenticate_peer)
    return transport


def client_transport(
    connection_host: str,
    mechanisms: tuple[str, ...],
    sasl: SaslSettings,
    domain: SSLDomain | None,
) -> Transport:
    transport = Transport(Transport.CLIENT)
    if domain is not None:
        ssl = SSL(transport, domain)
        ssl.peer_hostname = connection_host
    _configure_sasl(transport, mechanisms, sasl)
    return transport


def set_credentials(connection: Connection, user: str | None, password: str | None) -> None:
    if user:
        connection.user = user
    if password:
        connection.password = password
