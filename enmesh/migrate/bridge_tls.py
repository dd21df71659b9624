"""The certificate a bridged stack's routers present to the other stack's routers.

Each stack has its own CA; a router's inter-router listener accepts only certificates of
its own CA (mutual TLS, SASL EXTERNAL). So the routers of the stack that connects get a
certificate issued by the other stack's CA, and trust that CA for the other routers'
certificates. Made with the `openssl` command line tool, as the tls role makes every other
certificate of a stack (roles/tls/library/enmesh_certificate.py). Stacks sharing one CA
need none of this.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from enmesh.deploy.secrets import replace_file
from enmesh.migrate.ends import MigrateError

VALID_DAYS = 90  # a migration's bridge, not a permanent trust (nothing revokes it)
RENEW_BEFORE_SECONDS = 14 * 86400


@dataclass(frozen=True)
class BridgeFiles:
    ca: Path  # the other stack's CA certificate
    cert: Path
    key: Path

    def paths(self) -> tuple[Path, Path, Path]:
        return self.ca, self.cert, self.key


def files_for(tls_dir: Path, peer: str) -> BridgeFiles:
    stem = tls_dir / f"bridge-{peer}"
    return BridgeFiles(
        stem.with_name(f"{stem.name}-ca.crt"), stem.with_suffix(".crt"), stem.with_suffix(".key")
    )


def _openssl(*argv: str) -> subprocess.CompletedProcess[str]:
    # No stdin: a CA key with a passphrase fails at once instead of an unseen prompt.
    return subprocess.run(
        ["openssl", *argv], capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL
    )


def _still_good(files: BridgeFiles, ca_cert: Path) -> bool:
    """Issued by this CA, for this key, and valid for a while yet."""
    if not (files.cert.is_file() and files.key.is_file() and files.ca.is_file()):
        return False
    if files.ca.read_bytes() != ca_cert.read_bytes():
        return False
    verified = _openssl("verify", "-CAfile", str(ca_cert), str(files.cert))
    lasting = _openssl(
        "x509", "-in", str(files.cert), "-noout", "-checkend", str(RENEW_BEFORE_SECONDS)
    )
    cert_key = _openssl("x509", "-in", str(files.cert), "-noout", "-pubkey")
    key_key = _openssl("pkey", "-in", str(files.key), "-pubout")
    return (
        verified.returncode == 0
        and lasting.returncode == 0
        and cert_key.returncode == 0
        and cert_key.stdout == key_key.stdout
    )


def _owner(tls_dir: Path) -> tuple[int, int]:
    """Who the routers' own keys in `tls_dir` belong to (the user routers run as): the
    bridge key must be readable by them, not only by who runs `enmesh migrate`."""
    keys = sorted(tls_dir.glob("router-*-inter-router.key"))
    found = (keys[0] if keys else tls_dir).stat()
    return found.st_uid, found.st_gid


def ensure_bridge_certificate(
    files: BridgeFiles, ca_cert: Path, ca_key: Path, common_name: str
) -> bool:
    """Issue (or keep) `files`, owned as the routers' own keys; returns whether anything
    was written."""
    if _still_good(files, ca_cert):
        return False
    if not ca_key.is_file():
        raise MigrateError(
            f"the two stacks have different CAs, so the bridge needs a certificate from the "
            f"source's CA, whose key is not at {ca_key} (give its path with --from-ca-key, or "
            "give both stacks one CA: docs/migrate.md); nothing was changed"
        )
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        key, csr, cert, ext = (work / n for n in ("key.pem", "req.csr", "cert.pem", "ext.cnf"))
        ext.write_text(
            "basicConstraints=critical,CA:FALSE\n"
            "keyUsage=critical,digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=clientAuth\n"  # the target's routers only connect
        )
        steps = (
            ("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-out", str(key)),
            ("req", "-new", "-key", str(key), "-subj", f"/CN={common_name}", "-out", str(csr)),
            ("x509", "-req", "-in", str(csr), "-CA", str(ca_cert), "-CAkey", str(ca_key),
             "-set_serial", str(secrets.randbits(63)), "-days", str(VALID_DAYS),
             "-extfile", str(ext), "-out", str(cert)),
        )  # fmt: skip
        for step in steps:
            done = _openssl(*step)
            if done.returncode != 0:
                raise MigrateError(
                    f"openssl {step[0]} failed issuing the bridge certificate: "
                    f"{done.stderr.strip()}"
                )
        files.cert.parent.mkdir(parents=True, exist_ok=True)
        replace_file(files.key, key.read_bytes(), mode=0o600)
        replace_file(files.cert, cert.read_bytes(), mode=0o644)
        replace_file(files.ca, ca_cert.read_bytes(), mode=0o644)
        uid, gid = _owner(files.cert.parent)
        for path in files.paths():
            os.chown(path, uid, gid)
    return True


def remove(files: BridgeFiles) -> None:
    for path in files.paths():
        path.unlink(missing_ok=True)
