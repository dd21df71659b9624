"""The stack's TLS policy (`spec.tls`) in the terms of each component's configuration.

Routers: sslProfile `protocols` and `ciphers` (qdrouterd 1.19's attributes; they go to
proton's pn_ssl_domain_set_protocols / set_ciphers, so a real qdrouterd reads them the same
way). `ciphers` is an OpenSSL cipher list and covers TLS 1.2 only; OpenSSL's TLS 1.3 suites
are its defaults, all AEAD. RabbitMQ: `ssl_options.versions.N` and `ssl_options.ciphers.N`,
which its MQTT TLS listener shares. Erlang filters `ciphers` per version, so the TLS 1.3
suites are listed there too, or a TLS 1.3 handshake would find no suite.
"""

from __future__ import annotations

from enmesh.compile.stack import TlsPolicy, TlsVersion

TLS13_CIPHERS = ("TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256", "TLS_AES_128_GCM_SHA256")


def versions(policy: TlsPolicy) -> list[TlsVersion]:
    """Every version the policy allows, newest first."""
    allowed = list(TlsVersion)[list(TlsVersion).index(policy.minVersion) :]
    return allowed[::-1]


def router_ssl_attributes(policy: TlsPolicy) -> dict[str, str]:
    """sslProfile attributes: `protocols: TLSv1.2 TLSv1.3`, `ciphers: A:B:...`."""
    return {
        "protocols": " ".join(f"TLSv{v}" for v in reversed(versions(policy))),
        "ciphers": ":".join(policy.ciphers),
    }


def rabbitmq_ssl_lines(policy: TlsPolicy) -> list[str]:
    """rabbitmq.conf lines for `ssl_options` (the AMQPS and MQTTS listeners)."""
    allowed = versions(policy)
    suites = [
        *(TLS13_CIPHERS if TlsVersion.TLS_1_3 in allowed else ()),
        *(policy.ciphers if TlsVersion.TLS_1_2 in allowed else ()),
    ]
    return [
        *(f"ssl_options.versions.{i} = tlsv{v}" for i, v in enumerate(allowed, 1)),
        *(f"ssl_options.ciphers.{i} = {suite}" for i, suite in enumerate(suites, 1)),
        # The server's order decides, so a client cannot pick the weakest suite offered.
        "ssl_options.honor_cipher_order = true",
        "ssl_options.honor_ecc_order = true",
    ]
