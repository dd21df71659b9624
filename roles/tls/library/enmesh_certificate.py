#!/usr/bin/python
"""Ansible module: a CA or a CA-signed certificate, kept valid with the openssl CLI."""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
import tempfile
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: enmesh_certificate
short_description: Keep a private key and an X.509 certificate (CA or leaf) valid
description:
  - Creates an EC P-256 private key (mode 0600) if missing, and a certificate that is
    self-signed (a CA, when C(ca_cert) is not given) or signed by the given CA.
  - The certificate is issued again when it is missing, does not match the key, expires
    within C(renew_before_days), does not verify against the CA (the CA changed), or
    does not carry exactly the requested names. Otherwise nothing changes.
  - Uses the openssl command line tool only. Supports check mode.
  - One call keeps a list of certificates (C(certificates)) valid, so a host's set costs
    one module run.
options:
  certificates:
    description: The certificates, each with the options below.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: File stem; the files are DIRECTORY/NAME.crt and DIRECTORY/NAME.key.
        type: str
        required: true
      common_name: {description: Subject CN (default NAME)., type: str}
      dnsNames:
        description: subjectAltName DNS entries; IP addresses among them also become IP entries.
        type: list
        elements: str
        default: []
      cert: {description: Where hosts install the certificate (ignored here)., type: path}
      key: {description: Where hosts install the key (ignored here)., type: path}
  directory: {description: Where the keys and certificates are kept., type: path, required: true}
  ca_cert: {description: CA certificate; omit to make CAs (self-signed)., type: path}
  ca_privatekey: {description: CA private key., type: path}
  valid_days: {description: Validity of a new certificate., type: int, default: 365}
  renew_before_days:
    description: Issue again when it expires sooner than this.
    type: int
    default: 30
"""

RETURN = r"""
issued:
  description: Per issued (or, in check mode, due) certificate, its path and why.
  type: list
  returned: always
"""


class Openssl:
    def __init__(self, module: AnsibleModule) -> None:
        self.module = module

    def run(self, *args: str, check: bool = True) -> tuple[int, str, str]:
        rc, out, err = self.module.run_command(["openssl", *args])
        if check and rc != 0:
            self.module.fail_json(msg=f"openssl {args[0]} failed: {err.strip()}")
        return rc, out, err


def _wanted_names(params: dict) -> set[str]:
    names = {f"DNS:{n}" for n in params["dns_names"]}
    names |= {f"IP Address:{ip}" for ip in params["ip_addresses"]}
    return names


def _present_names(openssl: Openssl, path: str) -> set[str]:
    rc, out, _ = openssl.run("x509", "-in", path, "-noout", "-ext", "subjectAltName", check=False)
    if rc != 0:
        return set()
    lines = [line.strip() for line in out.splitlines()[1:] if line.strip()]
    return {entry.strip() for line in lines for entry in line.split(",")}


def _public_key(openssl: Openssl, *args: str) -> str:
    _, out, _ = openssl.run(*args, check=False)
    return out


def reasons_to_issue(openssl: Openssl, params: dict) -> list[str]:
    path, key = params["path"], params["privatekey_path"]
    if not Path(key).exists():
        return ["no private key"]
    if not Path(path).exists():
        return ["no certificate"]
    reasons = []
    if _public_key(openssl, "x509", "-in", path, "-noout", "-pubkey") != _public_key(
        openssl, "pkey", "-in", key, "-pubout"
    ):
        reasons.append("certificate does not match the private key")
    seconds = str(params["renew_before_days"] * 86400)
    if openssl.run("x509", "-in", path, "-noout", "-checkend", seconds, check=False)[0] != 0:
        reasons.append(f"expires within {params['renew_before_days']} days")
    _, subject, _ = openssl.run("x509", "-in", path, "-noout", "-subject", "-nameopt", "RFC2253")
    if subject.strip() != f"subject=CN={params['common_name']}":
        reasons.append("subject differs")
    if params["ca_cert"]:
        rc, _, _ = openssl.run("verify", "-CAfile", params["ca_cert"], path, check=False)
        if rc != 0:
            reasons.append("not signed by the current CA")
        if _present_names(openssl, path) != _wanted_names(params):
            reasons.append("names differ")
    return reasons


LEAF_EXTENSIONS = (
    "basicConstraints=critical,CA:FALSE\n"
    "keyUsage=critical,digitalSignature,keyEncipherment\n"
    "extendedKeyUsage=serverAuth,clientAuth\n"
)


def _new_key(openssl: Openssl, key: Path) -> None:
    old = os.umask(0o077)
    try:
        openssl.run(
            "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(key)
        )
    finally:
        os.umask(old)


def issue(openssl: Openssl, params: dict, new_key: bool) -> None:
    """Write a new certificate (and key, if asked) next to the old one, then swap it in."""
    path, key = Path(params["path"]), Path(params["privatekey_path"])
    if new_key:
        _new_key(openssl, key)
    key.chmod(0o600)
    subject, days = f"/CN={params['common_name']}", str(params["valid_days"])
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".issue-") as work:
        fresh = Path(work) / "cert.pem"
        if not params["ca_cert"]:
            openssl.run(
                "req",
                "-x509",
                "-new",
                "-key",
                str(key),
                "-subj",
                subject,
                "-days",
                days,
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
                "-out",
                str(fresh),
            )
        else:
            names = ",".join(sorted(_wanted_names(params))).replace("IP Address:", "IP:")
            extensions = Path(work) / "extensions.cnf"
            extensions.write_text(f"{LEAF_EXTENSIONS}subjectAltName={names}\n")
            request = Path(work) / "request.pem"
            openssl.run("req", "-new", "-key", str(key), "-subj", subject, "-out", str(request))
            openssl.run(
                "x509",
                "-req",
                "-in",
                str(request),
                "-CA",
                params["ca_cert"],
                "-CAkey",
                params["ca_privatekey"],
                "-set_serial",
                str(int.from_bytes(os.urandom(8), "big")),
                "-days",
                days,
                "-extfile",
                str(extensions),
                "-out",
                str(fresh),
            )
        fresh.chmod(0o644)
        fresh.replace(path)


CERTIFICATE_SPEC = {
    "name": {"type": "str", "required": True},
    "common_name": {"type": "str"},
    "dnsNames": {"type": "list", "elements": "str", "default": []},
    # Where hosts install them (deploy.json lists them too); not used here.
    "cert": {"type": "path"},
    "key": {"type": "path", "no_log": False},
}


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _request(directory: str, certificate: dict) -> dict:
    names = certificate["dnsNames"]
    return {
        "path": str(Path(directory, certificate["name"] + ".crt")),
        "privatekey_path": str(Path(directory, certificate["name"] + ".key")),
        "common_name": certificate["common_name"] or certificate["name"],
        "dns_names": names,
        "ip_addresses": [name for name in names if _is_ip(name)],
    }


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "certificates": {
                "type": "list",
                "elements": "dict",
                "required": True,
                "options": CERTIFICATE_SPEC,
            },
            "directory": {"type": "path", "required": True},
            "ca_cert": {"type": "path"},
            "ca_privatekey": {"type": "path", "no_log": False},
            "valid_days": {"type": "int", "default": 365},
            "renew_before_days": {"type": "int", "default": 30},
        },
        required_together=[("ca_cert", "ca_privatekey")],
        supports_check_mode=True,
    )
    shared = {k: v for k, v in module.params.items() if k not in ("certificates", "directory")}
    openssl = Openssl(module)
    issued = []
    with _locked(module.params["directory"]):
        for certificate in module.params["certificates"]:
            params = {**shared, **_request(module.params["directory"], certificate)}
            reasons = reasons_to_issue(openssl, params)
            if reasons:
                issued.append({"path": params["path"], "reasons": reasons})
                if not module.check_mode:
                    issue(openssl, params, new_key=not Path(params["privatekey_path"]).exists())
    module.exit_json(changed=bool(issued), issued=issued)


@contextlib.contextmanager
def _locked(directory: str):  # type: ignore[no-untyped-def]
    """The PKI directory to this run alone. The play runs this module for every host at
    once, and hosts share certificates (a broker cluster's nodes share the broker's): one
    host's run read broker-0.key while another's was writing it ("Could not read private
    key"). The second now waits, then finds the certificate there and valid."""
    with Path(directory, ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


if __name__ == "__main__":
    main()
