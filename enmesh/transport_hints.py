"""What a failed connection means, in words: proton reports transport mistakes (TLS to a
plain port, plain AMQP to a TLS port, PLAIN without TLS, an untrusted certificate) as raw
conditions such as `framing-error: Expected AMQP protocol header`. `explain` turns each
into what was wrong and what to try, keeping proton's words at the end for searching."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

# The CA a client trusts on the local stack (what `make up` prints; docs/getting-started.md).
LOCAL_CA = Path("/var/lib/enmesh/tls/ca.crt")


def _hostport(url: str) -> str:
    parts = urlsplit(url if "://" in url else f"amqp://{url}")
    default = 5671 if parts.scheme == "amqps" else 5672
    return f"{parts.hostname or 'localhost'}:{parts.port or default}"


def explain(url: str, *, mechanisms: str, ca: Path | None, raw: str) -> str:
    """A connection failure `raw` (condition name: description) explained for this client."""
    tls = url.startswith("amqps://")
    where = _hostport(url)
    text = raw.lower()
    hint = None
    # A TLS port answers a plain header with TLS bytes (proton: "Expected AMQP protocol
    # header") or, as enmesh-router's requireSsl listeners do, by closing the socket.
    if any(h in text for h in ("protocol header", "amqp header mismatch")):
        if not tls:
            hint = (
                f"{where} did not answer in plain AMQP: it is probably a TLS port; "
                f"use amqps://{where} with --ca FILE"
            )
    elif "ssl" in text and ("eof" in text or "wrong version" in text or "packet length" in text):
        if tls:
            hint = f"{where} does not speak TLS: it is probably a plain port; use amqp://{where}"
    elif "certificate verify failed" in text or "certificate_verify_failed" in text:
        if ca is None:
            hint = (
                "the server's certificate is signed by a CA this client does not trust: "
                f"pass --ca with the stack's CA (on the local stack {LOCAL_CA})"
            )
        else:
            hint = (
                f"the server's certificate does not verify against --ca {ca}, or does not "
                f"name the host in the URL ({where}); check both"
            )
    elif "mech=none" in text or "no worthy mechs" in text or "no mechanism" in text:
        plain_only = {m.upper() for m in mechanisms.split()} <= {"PLAIN"}
        if plain_only and not tls:
            hint = (
                "PLAIN sends the password as it is, so the server offers it only over TLS: "
                "use amqps://HOST:TLS_PORT with --ca FILE, or --mechanisms SCRAM-SHA-256 "
                f"on {where}"
            )
        else:
            hint = f"the server at {where} offers none of the mechanisms {mechanisms!r}"
    elif "connection refused" in text:
        hint = f"nothing listens at {where}: is the stack up? (`make status` probes every port)"
    return f"{hint} ({raw})" if hint else raw
