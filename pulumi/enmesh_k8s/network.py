"""`Namespace` and `NetworkPolicies`: tenancy of the stack in the cluster.

Ingress is denied by default; clients reach only the routers' AMQP ports, the MQTT
gateway's ports (the gateway reaches the routers as any AMQP client does) and the
console's HTTPS port (the console reaches every router pod's amqps port, named as a peer
so that a CNI whose ipBlock matches no pod lets it in), only routers reach the brokers,
brokers reach each other for clustering, only Keycloak reaches its database, only the
routers reach enmesh-auth (which asks Keycloak), and metrics
are open to namespaces labelled `enmesh.io/monitoring: "true"`.
"""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
import pulumi_kubernetes as k8s

from enmesh.k8s.layout import AUTH_PORT, BROKER_PORTS, KEYCLOAK_HTTPS, PORTS, KubeNames
from enmesh_k8s.console import PORT as CONSOLE_HTTPS
from enmesh_k8s.mqtt_gateway import MQTT_PORTS
from enmesh_k8s.workload import labels

net = k8s.networking.v1
meta = k8s.meta.v1
POSTGRES = 5432
MONITORING = {"enmesh.io/monitoring": "true"}


def namespace(names: KubeNames, opts: pulumi.ResourceOptions) -> k8s.core.v1.Namespace:
    """The stack's namespace, held to the `restricted` Pod Security Standard."""
    return k8s.core.v1.Namespace(
        names.namespace,
        metadata=meta.ObjectMetaArgs(
            name=names.namespace,
            labels={
                **labels(names.stack, "namespace"),
                "pod-security.kubernetes.io/enforce": "restricted",
                "pod-security.kubernetes.io/warn": "restricted",
            },
        ),
        opts=opts,
    )


class NetworkPolicies(pulumi.ComponentResource):
    def __init__(
        self,
        name: str,
        names: KubeNames,
        *,
        console: bool,
        keycloak: bool,
        mqtt_kinds: list[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("enmesh:k8s:NetworkPolicies", name, None, opts)
        self._names = names
        self._opts = pulumi.ResourceOptions(parent=self)
        components = (
            "router",
            "broker",
            "keycloak",
            "keycloak-db",
            "enmesh-auth",
            "mqtt-gateway",
            "console",
        )
        pods = {c: _pods(names.stack, c) for c in components}
        anyone = net.NetworkPolicyPeerArgs(ip_block=net.IPBlockArgs(cidr="0.0.0.0/0"))
        amqp_clients = [anyone, _peer(pods["router"])]
        if console:
            amqp_clients.append(_peer(pods["console"]))
        monitoring = net.NetworkPolicyPeerArgs(
            namespace_selector=meta.LabelSelectorArgs(match_labels=MONITORING)
        )
        self._policy("default-deny", meta.LabelSelectorArgs(), [])
        self._policy(
            "router",
            pods["router"],
            [
                _rule(amqp_clients, [PORTS["amqps"], PORTS["amqp"]]),
                _rule([_peer(pods["router"])], [PORTS["interRouter"]]),
                _rule([monitoring], [PORTS["metrics"]]),
            ],
        )
        self._policy(
            "broker",
            pods["broker"],
            [
                _rule([_peer(pods["router"])], [BROKER_PORTS["amqps"], BROKER_PORTS["mqtts"]]),
                _rule(
                    [_peer(pods["broker"])],
                    [BROKER_PORTS["epmd"], BROKER_PORTS["dist"], BROKER_PORTS["amqps"]],
                ),
                _rule([monitoring], [BROKER_PORTS["prometheus"]]),
            ],
        )
        if keycloak:
            self._identity(pods, anyone)
        self._policy(
            "mqtt-gateway",
            pods["mqtt-gateway"],
            [_rule([anyone], [MQTT_PORTS[kind] for kind in mqtt_kinds])],
        )
        if console:
            self._policy("console", pods["console"], [_rule([anyone], [CONSOLE_HTTPS])])
        self.register_outputs({})

    def _identity(
        self, pods: dict[str, meta.LabelSelectorArgs], anyone: net.NetworkPolicyPeerArgs
    ) -> None:
        """Keycloak (its users' own logins and admin console, and enmesh-auth), its
        database, and enmesh-auth, which only the routers ask."""
        self._policy("keycloak", pods["keycloak"], [_rule([anyone], [KEYCLOAK_HTTPS])])
        self._policy(
            "keycloak-db", pods["keycloak-db"], [_rule([_peer(pods["keycloak"])], [POSTGRES])]
        )
        self._policy("auth", pods["enmesh-auth"], [_rule([_peer(pods["router"])], [AUTH_PORT])])

    def _policy(
        self,
        name: str,
        selector: meta.LabelSelectorArgs,
        rules: Sequence[net.NetworkPolicyIngressRuleArgs],
    ) -> None:
        stack = self._names.stack
        net.NetworkPolicy(
            f"{stack}-{name}",
            metadata=meta.ObjectMetaArgs(
                name=f"{stack}-{name}",
                namespace=self._names.namespace,
                labels=labels(stack, "network-policy"),
            ),
            spec=net.NetworkPolicySpecArgs(
                pod_selector=selector, policy_types=["Ingress"], ingress=list(rules)
            ),
            opts=self._opts,
        )


def _pods(stack: str, component: str) -> meta.LabelSelectorArgs:
    return meta.LabelSelectorArgs(match_labels=labels(stack, component))


def _peer(selector: meta.LabelSelectorArgs) -> net.NetworkPolicyPeerArgs:
    return net.NetworkPolicyPeerArgs(pod_selector=selector)


def _rule(
    peers: Sequence[net.NetworkPolicyPeerArgs], ports: Sequence[int]
) -> net.NetworkPolicyIngressRuleArgs:
    return net.NetworkPolicyIngressRuleArgs(
        from_=list(peers),
        ports=[net.NetworkPolicyPortArgs(port=p, protocol="TCP") for p in sorted(set(ports))],
    )
