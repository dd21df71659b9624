"""TLS terminated by Python's ssl (memory BIOs) instead of proton, for listeners whose
SASL the router relays (enmesh.router.saslrelay): the relay must read the SASL frames,
which proton's own TLS layer would decrypt out of its reach. Everything a client sends
passes `unwrap` before the relay and proton see it; everything they send passes `wrap`.
"""

from __future__ import annotations

import ssl

from enmesh.router import tls_policy
from enmesh.router.security import TlsFiles, per_files_version

READ_CHUNK = 64 * 1024


@per_files_version
def server_context(tls: TlsFiles) -> ssl.SSLContext:
    """The listener's certificate and the sslProfile's TLS versions and ciphers."""
    if not (tls.cert_file and tls.private_key_file):
        raise ValueError("a TLS listener needs certFile and privateKeyFile in its sslProfile")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tls.cert_file, tls.private_key_file, tls.password)
    versions = (tls.protocols or tls_policy.DEFAULT_PROTOCOLS).split()
    known = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
    allowed = [known[v] for v in versions if v in known]
    if allowed:
        context.minimum_version, context.maximum_version = min(allowed), max(allowed)
    context.set_ciphers(tls.ciphers or tls_policy.DEFAULT_CIPHERS)
    return context


class TlsTerminator:
    def __init__(self, context: ssl.SSLContext) -> None:
        self._in, self._out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._in, self._out, server_side=True)
        self._waiting = b""  # plaintext written before the handshake finished
        self.closed = False  # the peer sent close_notify

    def unwrap(self, data: bytes) -> bytes:
        """Ciphertext from the peer -> the plaintext it carries (handshake bytes: none)."""
        self._in.write(data)
        plain: list[bytes] = []
        while True:
            try:
                chunk = self._tls.read(READ_CHUNK)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                self.closed = True
                break
            if not chunk:
                break
            plain.append(chunk)
        if self._waiting:
            self.wrap(b"")
        return b"".join(plain)

    def wrap(self, data: bytes) -> None:
        """Plaintext for the peer; the ciphertext waits in `take_output`."""
        self._waiting += data
        if not self._waiting:
            return
        try:
            self._tls.write(self._waiting)
        except ssl.SSLWantReadError:
            return  # the handshake is not over: sent once it is
        self._waiting = b""

    def take_output(self) -> bytes:
        """Ciphertext to write to the socket (handshake records included)."""
        return self._out.read()
