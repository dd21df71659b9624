"""A throw-away PKI made with the `openssl` command line tool.

File names follow what the compiler renders into router configs, relative to
`<paths.state>/tls/` (see tests/golden/local/routers/*.conf):

- `ca.crt`, `ca.key`: the CA every sslProfile trusts (`caCertFile`);
- `router-<i>-client.{crt,key}`: router *i*'s client-facing listener (`client-tls`);
- `router-<i>-inter-router.{crt,key}`: router *i*'s inter-router listener and connectors
  (`inter-router-tls`, SASL EXTERNAL, so it is used as a client certificate too);
- `broker-<name>.{crt,key}`: a broker's AMQPS listener, where `<name>` is the broker's
  name in the stack **without** a leading `broker-`; the local stack's broker
  `broker-0` therefore uses `broker-0.crt` / `broker-0.key` (see `broker_component`).
  The compiler does not reference broker certificates (RabbitMQ's TLS settings live in
  rabbitmq.conf, not in the definitions); this is the convention of these tests and the
  one deployment roles should follow.

Every leaf certificate has CN=<component>, subjectAltName DNS:localhost and
IP:127.0.0.1 (by default), extendedKeyUsage serverAuth+clientAuth, and is signed by the
CA. Keys are EC P-256 by default (fast) or RSA 2048, PEM PKCS#8, mode 0600.

An IP address in `hostnames` is put in the subjectAltName twice, as `IP:127.0.0.1` and
as `DNS:127.0.0.1` (`ip_as_dns=True`). The DNS form is needed by Qpid Proton: with
`VERIFY_PEER_NAME` and a peer host name `127.0.0.1` (a qdrouterd/skupper-router
connector with `host: 127.0.0.1` and `verifyHostname: true`, or a python-qpid-proton
client connecting to `amqps://127.0.0.1:...`) proton 0.40 matches the name only
against DNS entries, and the handshake fails with "certificate verify failed" when the
certificate has only `IP:127.0.0.1` (verified in tests/support_selftest). OpenSSL,
Python's ssl and Erlang use the IP entry.
"""

from __future__ import annotations

import ipaddress
import secrets
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

KeyType = Literal["ec", "rsa"]

CA_DAYS = 30
LEAF_DAYS = 30


def router_client(index: int) -> str:
    """Component name of router *index*'s client listener certificate."""
    return f"router-{index}-client"


def router_inter_router(index: int) -> str:
    """Component name of router *index*'s inter-router certificate."""
    return f"router-{index}-inter-router"


def broker_component(name: str) -> str:
    """Component name of a broker's certificate: `broker-<name>`, not doubling the prefix.

    `broker_component("broker-0") == broker_component("0") == "broker-0"`.
    """
    return name if name.startswith("broker-") else f"broker-{name}"


def stack_components(routers: int, brokers: Iterable[str]) -> list[str]:
    """Every component a stack with `routers` routers and these broker names needs."""
    names: list[str] = []
    for i in range(routers):
        names += [router_client(i), router_inter_router(i)]
    names += [broker_component(b) for b in brokers]
    return names


@dataclass(frozen=True)
class CertKey:
    """One component's certificate and private key."""

    component: str
    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    """Paths of a PKI made by `make_pki`."""

    directory: Path
    ca_cert: Path
    ca_key: Path
    pairs: tuple[CertKey, ...]

    def pair(self, component: str) -> CertKey:
        for pair in self.pairs:
            if pair.component == component:
                return pair
        raise KeyError(component)

    def cert(self, component: str) -> Path:
        return self.pair(component).cert

    def key(self, component: str) -> Path:
        return self.pair(component).key


def _openssl(*args: str, cwd: Path) -> None:
    result = subprocess.run(
        ["openssl", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        umask=0o077,
        timeout=60,
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"openssl {args[0]} failed ({result.returncode}): {result.stderr.strip()}"
        )


def _genkey(path: Path, key_type: KeyType) -> None:
    if key_type == "ec":
        algo = ["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"]
    else:
        algo = ["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"]
    _openssl("genpkey", *algo, "-out", str(path), cwd=path.parent)
    path.chmod(0o600)


def _san(hostnames: Sequence[str], ip_as_dns: bool) -> str:
    entries = []
    for name in hostnames:
        try:
            ipaddress.ip_address(name)
        except ValueError:
            entries.append(f"DNS:{name}")
        else:
            entries.append(f"IP:{name}")
            if ip_as_dns:
                entries.append(f"DNS:{name}")
    return ",".join(entries)


def make_pki(
    directory: Path,
    components: Sequence[str],
    hostnames: Sequence[str] = ("localhost", "127.0.0.1"),
    key_type: KeyType = "ec",
    ip_as_dns: bool = True,
) -> Pki:
    """Create a CA and one certificate per component in `directory` (created if missing).

    Existing files are overwritten. Raises RuntimeError with openssl's stderr on failure
    (it never contains key material).
    """
    if len(set(components)) != len(components):
        raise ValueError(f"duplicate components: {list(components)}")
    for name in components:
        if name == "ca" or not name or "/" in name:
            raise ValueError(f"bad component name {name!r}")
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = directory / "ca.key"
    ca_cert = directory / "ca.crt"
    _genkey(ca_key, key_type)
    _openssl(
        "req", "-x509", "-new", "-key", str(ca_key), "-sha256",
        "-days", str(CA_DAYS),
        "-subj", "/O=enmesh tests/CN=enmesh test CA",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        "-addext", "subjectKeyIdentifier=hash",
        "-out", str(ca_cert),
        cwd=directory,
    )  # fmt: skip
    ext_file = _leaf_extensions(directory, hostnames, key_type, ip_as_dns)
    pairs = [
        _issue(
            directory, name, ca_cert=ca_cert, ca_key=ca_key, ext_file=ext_file, key_type=key_type
        )
        for name in components
    ]
    ext_file.unlink()
    ca_cert.chmod(0o644)
    return Pki(directory=directory, ca_cert=ca_cert, ca_key=ca_key, pairs=tuple(pairs))


def reissue(
    pki: Pki,
    component: str,
    hostnames: Sequence[str] = ("localhost", "127.0.0.1"),
    key_type: KeyType = "ec",
    ip_as_dns: bool = True,
) -> CertKey:
    """A new key and certificate for `component` from the same CA, written over the old
    files (a renewal, as the tls role does before a certificate expires)."""
    ext_file = _leaf_extensions(pki.directory, hostnames, key_type, ip_as_dns)
    pair = _issue(
        pki.directory,
        component,
        ca_cert=pki.ca_cert,
        ca_key=pki.ca_key,
        ext_file=ext_file,
        key_type=key_type,
    )
    ext_file.unlink()
    return pair


def _leaf_extensions(
    directory: Path, hostnames: Sequence[str], key_type: KeyType, ip_as_dns: bool
) -> Path:
    usage = "digitalSignature" if key_type == "ec" else "digitalSignature,keyEncipherment"
    extensions = "\n".join(
        [
            "basicConstraints=critical,CA:FALSE",
            f"keyUsage=critical,{usage}",
            "extendedKeyUsage=serverAuth,clientAuth",
            f"subjectAltName={_san(hostnames, ip_as_dns)}",
            "subjectKeyIdentifier=hash",
            "authorityKeyIdentifier=keyid,issuer",
            "",
        ]
    )
    ext_file = directory / "leaf.ext"
    ext_file.write_text(extensions)
    return ext_file


def _issue(
    directory: Path, name: str, *, ca_cert: Path, ca_key: Path, ext_file: Path, key_type: KeyType
) -> CertKey:
    key = directory / f"{name}.key"
    cert = directory / f"{name}.crt"
    csr = directory / f"{name}.csr"
    _genkey(key, key_type)
    _openssl(
        "req", "-new", "-key", str(key), "-subj", f"/O=enmesh tests/CN={name}",
        "-out", str(csr), cwd=directory,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca_cert), "-CAkey", str(ca_key),
        "-set_serial", str(secrets.randbits(63)), "-days", str(LEAF_DAYS), "-sha256",
        "-extfile", str(ext_file), "-out", str(cert), cwd=directory,
    )  # fmt: skip
    csr.unlink()
    cert.chmod(0o644)
    return CertKey(component=name, cert=cert, key=key)
