"""`AuthService`: enmesh-auth as a Deployment behind a Service, between routers and Keycloak.

The routers' client TLS listener hands each login to it (the compiled `authServicePlugin`
names this Service); it checks the password with Keycloak and answers with the user's
rights. Its listener uses a certificate from the stack's CA, and it trusts Keycloak's
through the same CA. It remembers logins through the realm's `enmesh-auth-lookup` client,
whose secret is one of the stack's generated secrets (Credentials), given to both sides
(docs/identity.md).
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from enmesh.compile.identity import AUTH_COMPONENT, LOOKUP_SECRET, keycloak_url
from enmesh.compile.layout import Layout
from enmesh.k8s.config import KubeStackConfig
from enmesh.k8s.layout import AUTH_PORT, KubeLayout
from enmesh_k8s import workload as w
from enmesh_k8s.tls import CA_FILE

core = k8s.core.v1
AUTH_USER = 10000  # the enmesh image's uid, as for the routers
TLS_DIR = "/etc/enmesh-auth-tls"
SECRET_DIR = "/etc/enmesh-auth-lookup"


class AuthService(pulumi.ComponentResource):
    def __init__(
        self,
        name: str,
        *,
        layout: KubeLayout,
        config: KubeStackConfig,
        tls_secret: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("enmesh:k8s:AuthService", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        names = layout.names
        selector, object_meta, account = w.identity(
            names.stack, names.namespace, AUTH_COMPONENT, names.auth, child
        )
        compiled = Layout(layout.stack, layout.model)
        container = core.ContainerArgs(
            name="enmesh-auth",
            image=config.toolsImage,
            command=[
                "enmesh-auth",
                "--host=0.0.0.0",
                f"--port={AUTH_PORT}",
                f"--cert={TLS_DIR}/{AUTH_COMPONENT}.crt",
                f"--key={TLS_DIR}/{AUTH_COMPONENT}.key",
                f"--keycloak-url={keycloak_url(compiled)}",
                f"--keycloak-ca={TLS_DIR}/{CA_FILE}",
                f"--lookup-secret-file={SECRET_DIR}/{LOOKUP_SECRET[1]}",
                "--scram",  # Keycloak's pod builds enmesh's provider in (keycloak_provider.py)
            ],
            ports=[core.ContainerPortArgs(name="amqps", container_port=AUTH_PORT)],
            volume_mounts=[w.mount("tls", TLS_DIR), w.mount("lookup", SECRET_DIR)],
            resources=w.resources("250m", "128Mi"),
            security_context=w.container_security(),
            readiness_probe=w.tcp_probe("amqps", period=5),
            liveness_probe=w.tcp_probe("amqps"),
        )
        volumes = [
            w.tls_volume("tls", tls_secret),
            w.tls_volume("lookup", LOOKUP_SECRET[0]),  # the stack's generated secret
        ]
        # Two pods: a login needs one, so one may go while the other serves.
        w.spread_deployment(
            name, object_meta, selector, account, AUTH_USER, container, volumes, child
        )
        core.Service(
            f"{name}-service",
            metadata=object_meta,
            spec=core.ServiceSpecArgs(
                selector=selector, ports=[w.service_port("amqps", AUTH_PORT)]
            ),
            opts=child,
        )
        self.register_outputs({})


def certificate_names(layout: KubeLayout) -> list[str]:
    """What enmesh-auth's certificate names: its Service, as the routers address it."""
    names = layout.names
    return sorted({names.auth, names.service_host(names.auth)})
