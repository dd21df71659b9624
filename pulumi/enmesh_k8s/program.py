"""The Pulumi program: validate the stack config, compile the model, compose the components.

Everything that can be wrong with the input (stack config, model files) fails here, before
the first resource is registered, so a bad `pulumi up` changes nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pulumi
from pulumi.runtime.config import CONFIG

from enmesh.compile.errors import CompileError
from enmesh.compile.identity import (
    AUTH_COMPONENT,
    CONSOLE_SECRET,
    KEYCLOAK_ADMIN_SECRET,
    KEYCLOAK_DB_SECRET,
    LOOKUP_SECRET,
)
from enmesh.compile.layout import ROUTER_BROKER_SECRET
from enmesh.compile.stack import IdentityProvider
from enmesh.k8s.config import KubeStackConfig, StackConfigError, parse_config
from enmesh.k8s.layout import KubeLayout, kube_layout
from enmesh.model import ModelInvalidError
from enmesh_k8s import auth_service, console
from enmesh_k8s.broker_cluster import BrokerCluster
from enmesh_k8s.cluster import Cluster
from enmesh_k8s.credentials import Credentials
from enmesh_k8s.keycloak import Keycloak
from enmesh_k8s.monitoring import Monitoring
from enmesh_k8s.mqtt_gateway import CERTIFICATE, MqttGateway, certificate_names
from enmesh_k8s.network import NetworkPolicies, namespace
from enmesh_k8s.router_mesh import RouterMesh
from enmesh_k8s.tls import CertificateSpec, Tls

PROJECT_DIR = Path(__file__).resolve().parents[2]
STACKS_DIR = PROJECT_DIR / "stacks"


def load(stack: str, raw_config: dict[str, Any]) -> tuple[KubeStackConfig, KubeLayout]:
    source = f"stacks/Pulumi.{stack}.yaml"
    try:
        config = parse_config(raw_config, source)
        return config, kube_layout(config, stack, STACKS_DIR)
    except (StackConfigError, ModelInvalidError, CompileError) as error:
        raise pulumi.RunError(str(error)) from None


def _certificates(layout: KubeLayout, config: KubeStackConfig) -> dict[str, list[CertificateSpec]]:
    deployment = layout.deployment

    def specs(entries: list[dict[str, Any]]) -> list[CertificateSpec]:
        return [
            CertificateSpec(c["name"], c["dnsNames"]) for e in entries for c in e["certificates"]
        ]

    names = layout.names
    groups = {
        "router": specs(deployment["routers"]),
        "broker": specs(deployment["brokers"]),
        "mqtt": [CertificateSpec(CERTIFICATE, certificate_names(layout, list(config.dnsNames)))],
    }
    if _uses_keycloak(config):
        keycloak = [names.service_host(names.keycloak), names.keycloak, *config.dnsNames]
        groups["keycloak"] = [CertificateSpec("keycloak", sorted(set(keycloak)))]
        auth = auth_service.certificate_names(layout)
        groups["auth"] = [CertificateSpec(AUTH_COMPONENT, auth)]
    if config.console:
        console_names = console.certificate_names(layout, list(config.dnsNames))
        groups["console"] = [CertificateSpec(console.CERTIFICATE, console_names)]
    return groups


def _uses_keycloak(config: KubeStackConfig) -> bool:
    return config.identity is IdentityProvider.KEYCLOAK


def main() -> None:
    for key, value in sorted(build().items()):
        pulumi.export(key, value)


def _identity(
    layout: KubeLayout,
    config: KubeStackConfig,
    tls: Tls,
    credentials: Credentials,
    opts: pulumi.ResourceOptions,
) -> dict[str, Any]:
    """Keycloak with the model's realm, and enmesh-auth, which the routers ask."""
    after_credentials = pulumi.ResourceOptions.merge(
        opts, pulumi.ResourceOptions(depends_on=[credentials])
    )
    auth_service.AuthService(
        "auth",
        layout=layout,
        config=config,
        tls_secret=tls.secret_names["auth"],
        opts=after_credentials,  # it mounts the lookup client's secret by name
    )
    user_secrets = {u["secret"] for u in layout.deployment["users"]}
    keycloak = Keycloak(
        "keycloak",
        layout=layout,
        config=config,
        tls_secret=tls.secret_names["keycloak"],
        passwords={s: p for s, p in credentials.passwords.items() if s in user_secrets},
        lookup_secret=credentials.passwords[LOOKUP_SECRET[0]],
        console_secret=credentials.passwords.get(CONSOLE_SECRET[0]),
        opts=opts,
    )
    return {"keycloakUrl": keycloak.url, "keycloakAdminSecret": keycloak.admin_secret_name}


def build() -> dict[str, Any]:
    """Register every resource of the stack; returns the stack outputs."""
    stack = pulumi.get_stack()
    config, layout = load(stack, dict(CONFIG.get()))
    names = layout.names
    cluster = Cluster("cluster", config)
    on_cluster = pulumi.ResourceOptions(provider=cluster.provider)
    ns = namespace(names, on_cluster)
    opts = pulumi.ResourceOptions(provider=cluster.provider, depends_on=[ns])
    deployment = layout.deployment
    # Keycloak's own passwords are its component's (kept under their first names).
    keycloak_own = {KEYCLOAK_ADMIN_SECRET[0], KEYCLOAK_DB_SECRET[0]}
    secrets = {s["name"]: s["key"] for s in deployment["secrets"] if s["name"] not in keycloak_own}
    if config.consoleUrl:  # the console's Keycloak client (the compiler's console is a host's)
        secrets[CONSOLE_SECRET[0]] = CONSOLE_SECRET[1]
    credentials = Credentials(
        "credentials", stack=stack, namespace=names.namespace, secrets=secrets, opts=opts
    )
    tls = Tls("tls", stack, names.namespace, _certificates(layout, config), opts=opts)
    NetworkPolicies(
        "network",
        names,
        console=config.console,
        keycloak=_uses_keycloak(config),
        mqtt_kinds=list(config.mqtt_service_ports),
        opts=opts,
    )
    mesh = RouterMesh(
        "router",
        layout=layout,
        config=config,
        tls_secret=tls.secret_names["router"],
        credentials=secrets,
        passwords=credentials.passwords,
        opts=pulumi.ResourceOptions(provider=cluster.provider, depends_on=[ns, credentials]),
    )
    brokers = BrokerCluster(
        "broker",
        layout=layout,
        config=config,
        tls_secret=tls.secret_names["broker"],
        router_password=credentials.passwords[ROUTER_BROKER_SECRET],
        opts=opts,
    )
    mqtt = MqttGateway(
        "mqtt",
        layout=layout,
        config=config,
        tls_secret=tls.secret_names["mqtt"],
        opts=pulumi.ResourceOptions(provider=cluster.provider, depends_on=[ns, mesh]),
    )
    if config.prometheusOperator:
        Monitoring("monitoring", layout=layout, config=config, opts=opts)
    outputs: dict[str, Any] = {
        "namespace": names.namespace,
        "endpoint": mesh.endpoint,
        "caCertificate": tls.ca_cert_pem,
        "routerConfigSecret": mesh.config_secret_name,
        "mqttService": mqtt.service.metadata.apply(lambda m: str(m.name)),
        "brokerService": brokers.service_host,
        "brokerReplicas": brokers.replicas,
    }
    if _uses_keycloak(config):
        outputs |= _identity(layout, config, tls, credentials, opts)
    if config.console:
        outputs["consoleUrl"] = console.Console(
            "console",
            layout=layout,
            config=config,
            models=[STACKS_DIR / model for model in config.models],
            tls_secret=tls.secret_names["console"],
            opts=pulumi.ResourceOptions(provider=cluster.provider, depends_on=[ns, mesh]),
        ).url
    if cluster.kubeconfig is not None:
        outputs["kubeconfig"] = cluster.kubeconfig
    return outputs
