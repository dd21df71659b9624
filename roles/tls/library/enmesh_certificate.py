#!/usr/bin/python
"""Ansible module: a CA or a CA-signed certificate, kept valid with the openssl CLI."""

from __future__ import annotations

import os
import re
import tempfile

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
options:
  path: {description: Certificate file (PEM)., type: path, required: true}
  privatekey_path: {description: Private key file (PEM, PKCS#8)., type: path, required: true}
  common_name: {description: Subject CN., type: str, required: true}
  dns_names: {description: subjectAltName DNS entries., type: list, elements: str, default: []}
  ip_addresses: {description: subjectAltName IP entries., type: list, elements: str, default: []}
  ca_cert: {description: CA certificate; omit to make a CA., type: path}
  ca_privatekey: {description: CA private key., type: path}
  valid_days: {description: Validity of a new certificate., type: int, default: 365}
  renew_before_days: {description: Issue again when it expires sooner than this., type: int, default: 30}
"""

RETURN = r"""
reasons: {description: Why the certificate was (or would be) issued., type: list, returned: always}
not_after: {description: Expiry of the certificate now in place., type: str, returned: success}
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
    if not os.path.exists(key):
        return ["no private key"]
    if not os.path.exists(path):
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


def issue(openssl: Openssl, params: dict, new_key: bool) -> None:
    path, key = params["path"], params["privatekey_path"]
    directory = os.path.dirname(path) or "."
    if new_key:
        old = os.umask(0o077)
        try:
            openssl.run("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                        "-out", key)
        finally:
            os.umask(old)
    os.chmod(key, 0o600)
    subject = f"/CN={params['common_name']}"
    days = str(params["valid_days"])
    fd, temporary = tempfile.mkstemp(dir=directory, prefix=".cert-")
    os.close(fd)
    try:
        if not params["ca_cert"]:
            openssl.run("req", "-x509", "-new", "-key", key, "-subj", subject, "-days", days,
                        "-addext", "basicConstraints=critical,CA:TRUE",
                        "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-out", temporary)
        else:
            names = ",".join(sorted(_wanted_names(params))).replace("IP Address:", "IP:")
            fd, csr = tempfile.mkstemp(dir=directory, prefix=".csr-")
            os.close(fd)
            fd, ext = tempfile.mkstemp(dir=directory, prefix=".ext-")
            with os.fdopen(fd, "w") as handle:
                handle.write("basicConstraints=critical,CA:FALSE\n"
                             "keyUsage=critical,digitalSignature,keyEncipherment\n"
                             "extendedKeyUsage=serverAuth,clientAuth\n"
                             f"subjectAltName={names}\n")
            try:
                openssl.run("req", "-new", "-key", key, "-subj", subject, "-out", csr)
                openssl.run("x509", "-req", "-in", csr, "-CA", params["ca_cert"],
                            "-CAkey", params["ca_privatekey"], "-set_serial",
                            str(int.from_bytes(os.urandom(8), "big")), "-days", days,
                            "-extfile", ext, "-out", temporary)
            finally:
                os.unlink(csr)
                os.unlink(ext)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "privatekey_path": {"type": "path", "required": True, "no_log": False},
            "common_name": {"type": "str", "required": True},
            "dns_names": {"type": "list", "elements": "str", "default": []},
            "ip_addresses": {"type": "list", "elements": "str", "default": []},
            "ca_cert": {"type": "path"},
            "ca_privatekey": {"type": "path", "no_log": False},
            "valid_days": {"type": "int", "default": 365},
            "renew_before_days": {"type": "int", "default": 30},
        },
        required_together=[("ca_cert", "ca_privatekey")],
        supports_check_mode=True,
    )
    params = module.params
    openssl = Openssl(module)
    reasons = reasons_to_issue(openssl, params)
    if reasons and not module.check_mode:
        issue(openssl, params, new_key=not os.path.exists(params["privatekey_path"]))
    not_after = ""
    if os.path.exists(params["path"]):
        _, out, _ = openssl.run("x509", "-in", params["path"], "-noout", "-enddate")
        not_after = re.sub(r"^notAfter=", "", out.strip())
    module.exit_json(changed=bool(reasons), reasons=reasons, not_after=not_after)


if __name__ == "__main__":
    main()
