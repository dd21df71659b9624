"""Names and the compiled Stack of a Kubernetes stack: the compiler sees pods as hosts.

Router `i` is pod `<stack>-router-<i>` of a StatefulSet, reached by its peers through the
headless Service `<stack>-router-mesh`; its compiled id is the pod name, so a pod picks its
configuration file by `$(POD_NAME)`. The RabbitMQ cluster is one broker to the compiler,
`broker-cluster`, reached through its client Service; the plans' broker count becomes the
cluster's node count (quorum queues replicate across the nodes instead of being placed on
separate brokers).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from enmesh.compile import Artefacts, Stack, compile_model
from enmesh.compile.stack import (
    AuthService,
    Broker,
    Identity,
    Keycloak,
    PeerDiscovery,
    RouterPorts,
    Routers,
    StackPaths,
    StackSpec,
    TlsPolicy,
)
from enmesh.k8s.config import KubeStackConfig
from enmesh.model import Model, SpaceType, load_model

BROKER_NAME = "broker-cluster"
PORTS = {"amqp": 5672, "amqps": 5671, "interRouter": 55671, "metrics": 9090}
BROKER_PORTS = {"amqps": 5671, "mqtts": 8883, "prometheus": 15692, "dist": 25672, "epmd": 4369}
AUTH_PORT = 5671  # enmesh-auth's AMQPS, in its own pod
KEYCLOAK_HTTPS = 8443
PATHS = StackPaths(config="/etc/enmesh", state="/var/lib/enmesh", secrets="/etc/enmesh-secrets")


@dataclass(frozen=True)
class KubeNames:
    stack: str
    namespace: str
    cluster_domain: str

    def service_host(self, service: str) -> str:
        return f"{service}.{self.namespace}.svc.{self.cluster_domain}"

    @property
    def router(self) -> str:
        return f"{self.stack}-router"

    @property
    def router_mesh(self) -> str:
        return f"{self.stack}-router-mesh"

    @property
    def messaging(self) -> str:
        return f"{self.stack}-messaging"

    @property
    def broker(self) -> str:
        return f"{self.stack}-broker"

    @property
    def broker_nodes(self) -> str:
        return f"{self.stack}-broker-nodes"

    @property
    def keycloak(self) -> str:
        return f"{self.stack}-keycloak"

    @property
    def keycloak_db(self) -> str:
        return f"{self.stack}-keycloak-db"

    @property
    def auth(self) -> str:
        return f"{self.stack}-auth"

    def router_pod_host(self, index: int) -> str:
        return f"{self.router}-{index}.{self.service_host(self.router_mesh)}"


@dataclass(frozen=True)
class KubeLayout:
    """What the Pulumi components deploy: the compiled files and the counts from the plans."""

    names: KubeNames
    stack: Stack
    model: Model
    artefacts: Artefacts
    router_max: int  # compiled routers: the HorizontalPodAutoscaler's upper bound
    router_min: int
    broker_replicas: int

    @cached_property
    def deployment(self) -> dict[str, Any]:
        """The compiled `deploy.json`: certificates, secrets, users per router and broker."""
        return json.loads(self.artefacts.files["deploy.json"])  # type: ignore[no-any-return]


def plan_limits(model: Model) -> tuple[int, int]:
    """(routers, brokers): the largest limits any tenant's plan allows."""
    routers = [
        t.plan.spec.resourceLimits.routers
        for t in model.tenants
        if t.space.spec.type is SpaceType.STANDARD
    ]
    brokers = [t.plan.spec.resourceLimits.brokers for t in model.tenants]
    return max(routers, default=1), max(brokers, default=1)


def kube_layout(config: KubeStackConfig, stack_name: str, stacks_dir: Path) -> KubeLayout:
    names = KubeNames(stack_name, config.namespace, config.clusterDomain)
    model = load_model([stacks_dir / name for name in config.models])
    router_max, plan_brokers = plan_limits(model)
    client_names = [
        names.service_host(names.messaging),
        f"{names.messaging}.{names.namespace}",
        names.messaging,
        *config.dnsNames,
    ]
    spec = StackSpec(
        models=config.models,
        routers=Routers(
            engine=config.routerEngine,  # compiled for it; a model it cannot serve is refused
            count=router_max,
            hosts=[names.router_pod_host(i) for i in range(router_max)],
            ports=RouterPorts(**PORTS),
            listenHost="0.0.0.0",  # every interface of the pod; NetworkPolicies gate them
            clientDnsNames=sorted(set(client_names)),
        ),
        brokers=[
            Broker(
                name=BROKER_NAME,
                host=names.service_host(names.broker),
                amqpsPort=BROKER_PORTS["amqps"],
                mqttsPort=BROKER_PORTS["mqtts"],
                prometheusPort=BROKER_PORTS["prometheus"],
                distPort=BROKER_PORTS["dist"],
                listenHost="0.0.0.0",
                peerDiscovery=PeerDiscovery(
                    service=names.broker_nodes,
                    namespace=names.namespace,
                    clusterDomain=names.cluster_domain,
                ),
            )
        ],
        paths=PATHS,
        tls=TlsPolicy(minVersion=config.tlsMinVersion),
        identity=Identity(
            provider=config.identity,
            authService=AuthService(host=names.service_host(names.auth), port=AUTH_PORT),
            keycloak=Keycloak(host=names.service_host(names.keycloak), port=KEYCLOAK_HTTPS),
        ),
    )
    stack = Stack(apiVersion="enmesh.io/v1", kind="Stack", metadata={"name": stack_name}, spec=spec)
    return KubeLayout(
        names=names,
        stack=stack,
        model=model,
        artefacts=compile_model(stack, model),
        router_max=router_max,
        router_min=min(config.routerMinReplicas, router_max),
        broker_replicas=config.brokerReplicas or plan_brokers,
    )
