"""`MqttGateway`: enmesh-mqtt-gateway as a Deployment behind a Service (1883, 8883, WebSocket).

The gateway is an AMQP client of the routers' client Service (amqps, the stack's CA), so
it works in front of any router engine the stack runs. Its listeners use a certificate
from the stack's CA. Wills live in an emptyDir: they survive a restart of the container,
not the loss of the pod (docs/mqtt.md, "Limits"). The compiled address index (wildcard
subscriptions) is a ConfigMap under a fixed name: the kubelet refreshes the mounted file
when `pulumi up` changes the model, and the gateway follows it without a restart.
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from enmesh.k8s.config import KubeStackConfig
from enmesh.k8s.layout import PORTS, KubeLayout
from enmesh.mqtt.topics import ADDRESSES_FILE
from enmesh_k8s import workload as w
from enmesh_k8s.tls import CA_FILE

core = k8s.core.v1
GATEWAY_USER = 10000  # the enmesh image's uid, as for the routers
MQTT_PORTS = {"mqtt": 1883, "mqtts": 8883, "ws": 8083, "wss": 8084}
CERTIFICATE = "mqtt-gateway"
TLS_DIR = "/etc/enmesh-mqtt-tls"
STATE_DIR = "/var/lib/enmesh-mqtt"
ADDRESSES_DIR = "/etc/enmesh-mqtt-addresses"


def gateway_name(stack: str) -> str:
    return f"{stack}-mqtt"


class MqttGateway(pulumi.ComponentResource):
    service: core.Service

    def __init__(
        self,
        name: str,
        *,
        layout: KubeLayout,
        config: KubeStackConfig,
        tls_secret: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("enmesh:k8s:MqttGateway", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        names = layout.names
        selector, object_meta, account = w.identity(
            names.stack, names.namespace, "mqtt-gateway", gateway_name(names.stack), child
        )
        addresses = core.ConfigMap(
            f"{name}-addresses",
            metadata=w.metadata(
                f"{gateway_name(names.stack)}-addresses", names.namespace, selector
            ),
            data={"addresses.json": layout.artefacts.files[ADDRESSES_FILE]},
            opts=child,
        )
        router = f"amqps://{names.service_host(names.messaging)}:{PORTS['amqps']}"
        # Listeners the stack keeps (enmesh:mqtt*Port); in the pod each has its usual port.
        exposed = config.mqtt_service_ports
        listen = [f"--listen={kind}:0.0.0.0:{MQTT_PORTS[kind]}" for kind in exposed]
        probed = next(iter(exposed))
        container = core.ContainerArgs(
            name="gateway",
            image=config.toolsImage,
            command=[
                "enmesh-mqtt-gateway",
                f"--router={router}",
                f"--router-ca={TLS_DIR}/{CA_FILE}",
                *listen,
                f"--tls-cert={TLS_DIR}/{CERTIFICATE}.crt",
                f"--tls-key={TLS_DIR}/{CERTIFICATE}.key",
                f"--state-dir={STATE_DIR}",
                f"--addresses={ADDRESSES_DIR}/addresses.json",
            ],
            ports=[core.ContainerPortArgs(name=k, container_port=MQTT_PORTS[k]) for k in exposed],
            volume_mounts=[
                w.mount("tls", TLS_DIR),
                w.mount("state", STATE_DIR, read_only=False),
                w.mount("addresses", ADDRESSES_DIR),
            ],
            resources=w.resources("250m", "256Mi"),
            security_context=w.container_security(),
            readiness_probe=w.tcp_probe(probed, period=5),
            liveness_probe=w.tcp_probe(probed),
        )
        volumes = [
            w.tls_volume("tls", tls_secret),
            w.empty_dir("state"),
            core.VolumeArgs(
                name="addresses",
                config_map=core.ConfigMapVolumeSourceArgs(
                    name=addresses.metadata.apply(lambda m: str(m.name))
                ),
            ),
        ]
        w.spread_deployment(
            name,
            object_meta,
            selector,
            account,
            GATEWAY_USER,
            container,
            volumes,
            child,
            grace_seconds=15,
        )
        self.service = core.Service(
            f"{name}-service",
            metadata=object_meta,
            spec=core.ServiceSpecArgs(
                type=config.provider.client_service_type,
                selector=selector,
                ports=[w.service_port(k, p) for k, p in exposed.items()],
                # A device comes back to the replica that holds its parked persistent
                # session (docs/mqtt.md): sessions live in one gateway process.
                session_affinity="ClientIP",
            ),
            opts=child,
        )
        self.register_outputs({})


def certificate_names(layout: KubeLayout, dns_names: list[str]) -> list[str]:
    """What the gateway's certificate names: its Service, in and outside the cluster."""
    service = gateway_name(layout.names.stack)
    return sorted({service, layout.names.service_host(service), *dns_names})
