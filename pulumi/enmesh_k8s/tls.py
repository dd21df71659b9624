"""`Tls`: a pulumi-tls CA and the certificates the compiled stack names, kept in Secrets.

`deploy.json` says which certificate each router and broker needs and the names it must
carry; this component issues them and groups them into one `kubernetes.io/tls`-style
Secret per workload, with the files named as the compiled configs reference them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s
import pulumi_tls as tls

from enmesh_k8s.workload import labels, metadata

CA_VALIDITY_HOURS = 10 * 365 * 24
CERT_VALIDITY_HOURS = 365 * 24
RENEW_BEFORE_HOURS = 30 * 24  # `pulumi up` in the last 30 days issues a new certificate
CA_FILE = "ca.crt"


@dataclass(frozen=True)
class CertificateSpec:
    name: str  # file stem: <name>.crt / <name>.key
    dns_names: Sequence[str]


class Tls(pulumi.ComponentResource):
    ca_cert_pem: pulumi.Output[str]
    secret_names: dict[str, pulumi.Output[str]]  # group -> Secret name

    def __init__(
        self,
        name: str,
        stack: str,
        namespace: pulumi.Input[str],
        groups: Mapping[str, Sequence[CertificateSpec]],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("enmesh:k8s:Tls", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        ca_key = tls.PrivateKey(f"{name}-ca", algorithm="ECDSA", ecdsa_curve="P256", opts=child)
        ca = tls.SelfSignedCert(
            f"{name}-ca",
            private_key_pem=ca_key.private_key_pem,
            is_ca_certificate=True,
            subject=tls.SelfSignedCertSubjectArgs(
                common_name=f"enmesh {stack} CA", organization="enmesh"
            ),
            validity_period_hours=CA_VALIDITY_HOURS,
            early_renewal_hours=RENEW_BEFORE_HOURS,
            allowed_uses=["cert_signing", "crl_signing", "digital_signature"],
            opts=child,
        )
        self.ca_cert_pem = ca.cert_pem
        self.secret_names = {}
        for group, specs in sorted(groups.items()):
            files: dict[str, pulumi.Input[str]] = {CA_FILE: ca.cert_pem}
            for spec in specs:
                key, cert = self._issue(name, spec, ca_key, ca, child)
                files[f"{spec.name}.crt"] = cert
                files[f"{spec.name}.key"] = key
            secret_name = f"{stack}-{group}-tls"
            secret = k8s.core.v1.Secret(
                f"{name}-{group}",
                metadata=metadata(secret_name, namespace, labels(stack, group)),
                type="Opaque",
                string_data=files,
                opts=child,
            )
            self.secret_names[group] = secret.metadata.apply(lambda m: str(m.name))
        self.register_outputs({"caCertPem": self.ca_cert_pem})

    @staticmethod
    def _issue(
        prefix: str,
        spec: CertificateSpec,
        ca_key: tls.PrivateKey,
        ca: tls.SelfSignedCert,
        opts: pulumi.ResourceOptions,
    ) -> tuple[pulumi.Output[str], pulumi.Output[str]]:
        key = tls.PrivateKey(
            f"{prefix}-{spec.name}", algorithm="ECDSA", ecdsa_curve="P256", opts=opts
        )
        request = tls.CertRequest(
            f"{prefix}-{spec.name}",
            private_key_pem=key.private_key_pem,
            subject=tls.CertRequestSubjectArgs(common_name=spec.name, organization="enmesh"),
            dns_names=sorted(spec.dns_names),
            opts=opts,
        )
        cert = tls.LocallySignedCert(
            f"{prefix}-{spec.name}",
            cert_request_pem=request.cert_request_pem,
            ca_private_key_pem=ca_key.private_key_pem,
            ca_cert_pem=ca.cert_pem,
            validity_period_hours=CERT_VALIDITY_HOURS,
            early_renewal_hours=RENEW_BEFORE_HOURS,
            allowed_uses=["digital_signature", "key_encipherment", "server_auth", "client_auth"],
            opts=opts,
        )
        return key.private_key_pem, cert.cert_pem
