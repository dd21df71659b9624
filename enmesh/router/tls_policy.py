"""TLS versions and cipher suites of an sslProfile, and TLS-first on `requireSsl` listeners.

qdrouterd 1.19's sslProfile has `protocols` (space-separated `TLSv1`, `TLSv1.1`, `TLSv1.2`,
`TLSv1.3`) and `ciphers` (an OpenSSL cipher list, TLS 1.2 and older; TLS 1.3 suites are
OpenSSL's defaults, all AEAD). Both go to proton's `pn_ssl_domain_set_protocols` /
`pn_ssl_domain_set_ciphers`, as in qdrouterd (see `security.restrict`). Where a profile
leaves them out, the router still offers only TLS 1.2+ and forward-secret AEAD suites, not
OpenSSL's defaults (which include TLS 1.0 and CBC-SHA1 suites).
"""

from __future__ import annotations

import ssl

PROTOCOL_NAMES = ("TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3")
DEFAULT_PROTOCOLS = "TLSv1.2 TLSv1.3"
DEFAULT_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"
TLS_HANDSHAKE_RECORD = 0x16  # ContentType handshake: the first byte of every ClientHello


def parse_protocols(text: str) -> str:
    """`protocols` as written, checked: proton would refuse it only at the first connection."""
    names = text.split()
    unknown = [name for name in names if name not in PROTOCOL_NAMES]
    if unknown or not names:
        raise ValueError(
            f"expected one or more of {', '.join(PROTOCOL_NAMES)} separated by spaces, got {text!r}"
        )
    return " ".join(names)


def parse_ciphers(text: str) -> str:
    """`ciphers` as written, checked against the OpenSSL the router runs on."""
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).set_ciphers(text)
    except ssl.SSLError:
        raise ValueError(
            f"no cipher suite matches {text!r} (see `openssl ciphers -v '{text}'`)"
        ) from None
    return text


def refuse_unless_tls(first_bytes: bytes) -> str | None:
    """Why a connection to a TLS-only listener is dropped before proton sees it, or None.

    proton's server transport starts with a protocol-detection layer that accepts a
    plaintext SASL header whatever the SSL domain says; it refuses an unencrypted client
    only at the AMQP header, after the whole SASL exchange. That made TLS-only listeners
    a password oracle for clients that never spoke TLS, so the first byte decides here.
    """
    if first_bytes[0] == TLS_HANDSHAKE_RECORD:
        return None
    return f"refused: TLS required, client sent {first_bytes[:8]!r}"
