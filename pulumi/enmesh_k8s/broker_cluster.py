"""`BrokerCluster`: RabbitMQ (official image) as a StatefulSet that clusters itself.

Nodes find each other through Kubernetes peer discovery on a headless Service and speak
Erlang distribution over TLS (see enmesh.k8s.broker_env), queues are quorum queues
(compiled), data sits on a PVC per node in the stack's storage class, and the compiled
definitions, with the routers' user added as a password hash, load at boot.
"""

from __future__ import annotations

import base64
import hashlib

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random

from enmesh.compile.broker_nodes import inter_node_tls_file
from enmesh.compile.layout import ROUTER_BROKER_USER
from enmesh.k8s.broker_env import COOKIE_ENV, rabbitmq_env_conf
from enmesh.k8s.config import KubeStackConfig
from enmesh.k8s.layout import BROKER_NAME, BROKER_PORTS, PATHS, KubeLayout
from enmesh.k8s.rabbitmq_hash import SALT_BYTES, with_user
from enmesh_k8s import workload as w

core = k8s.core.v1
rbac = k8s.rbac.v1
RABBITMQ_USER = 999  # the official image's rabbitmq user
DATA_DIR = "/var/lib/rabbitmq"
CONF = f"brokers/{BROKER_NAME}.rabbitmq.conf"
DEFINITIONS = f"brokers/{BROKER_NAME}.definitions.json"
PLUGINS = "brokers/enabled_plugins"
ENV_FILE = "brokers/rabbitmq-env.conf"
PLUGIN_LIST = "[rabbitmq_amqp1_0,rabbitmq_mqtt,rabbitmq_peer_discovery_k8s,rabbitmq_prometheus].\n"


class BrokerCluster(pulumi.ComponentResource):
    service_host: str
    replicas: int

    def __init__(
        self,
        name: str,
        *,
        layout: KubeLayout,
        config: KubeStackConfig,
        tls_secret: pulumi.Input[str],
        router_password: pulumi.Output[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("enmesh:k8s:BrokerCluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        names, namespace = layout.names, layout.names.namespace
        selector = w.labels(names.stack, "broker")
        self.replicas = layout.broker_replicas
        self.service_host = names.service_host(names.broker)

        cookie = random.RandomPassword(f"{name}-cookie", length=48, special=False, opts=child)
        cookie_secret = core.Secret(
            f"{name}-cookie",
            metadata=w.metadata(f"{names.broker}-cookie", namespace, selector),
            string_data={"cookie": cookie.result},
            opts=child,
        )
        salt = random.RandomBytes(f"{name}-router-salt", length=SALT_BYTES, opts=child)
        definitions = pulumi.Output.all(router_password, salt.base64).apply(
            lambda values: with_user(
                layout.artefacts.files[DEFINITIONS],
                ROUTER_BROKER_USER,
                str(values[0]),
                base64.b64decode(str(values[1])),
            )
        )
        tls_dist = _tls_dist_file(layout)
        env_conf = rabbitmq_env_conf(BROKER_NAME, f"{PATHS.config}/{tls_dist}")
        # The pods roll when any file they read changes, compiled or written here.
        config_hash = hashlib.sha256(
            "\0".join([layout.artefacts.content_hash("brokers/"), PLUGIN_LIST, env_conf]).encode()
        ).hexdigest()[:10]
        files: dict[str, pulumi.Input[str]] = {
            CONF: layout.artefacts.files[CONF],
            DEFINITIONS: pulumi.Output.secret(definitions),
            PLUGINS: PLUGIN_LIST,
            tls_dist: layout.artefacts.files[tls_dist],
            ENV_FILE: env_conf,
        }
        config_secret = core.Secret(
            f"{name}-config",
            metadata=w.metadata(f"{names.broker}-config-{config_hash}", namespace, selector),
            string_data={w.secret_file_key(path): text for path, text in files.items()},
            opts=child,
        )
        account = self._account(name, layout, selector, child)
        core.Service(
            f"{name}-nodes",
            metadata=w.metadata(names.broker_nodes, namespace, selector),
            spec=core.ServiceSpecArgs(
                cluster_ip="None",
                publish_not_ready_addresses=True,  # nodes discover peers before they are ready
                selector=selector,
                ports=[_port("epmd"), _port("dist"), _port("amqps")],
            ),
            opts=child,
        )
        core.Service(
            f"{name}-client",
            metadata=w.metadata(names.broker, namespace, selector),
            spec=core.ServiceSpecArgs(
                selector=selector, ports=[_port("amqps"), _port("mqtts"), _port("prometheus")]
            ),
            opts=child,
        )
        pod = self._pod(
            layout=layout,
            config=config,
            config_secret=config_secret.metadata.apply(lambda m: str(m.name)),
            config_files=sorted(files),
            cookie_secret=cookie_secret.metadata.apply(lambda m: str(m.name)),
            tls_secret=tls_secret,
            account=account.metadata.apply(lambda m: str(m.name)),
        )
        k8s.apps.v1.StatefulSet(
            name,
            metadata=w.metadata(names.broker, namespace, selector),
            spec=k8s.apps.v1.StatefulSetSpecArgs(
                service_name=names.broker_nodes,
                replicas=layout.broker_replicas,
                selector=k8s.meta.v1.LabelSelectorArgs(match_labels=selector),
                template=core.PodTemplateSpecArgs(
                    metadata=k8s.meta.v1.ObjectMetaArgs(
                        labels=selector, annotations={"enmesh.io/config-hash": config_hash}
                    ),
                    spec=pod,
                ),
                volume_claim_templates=[
                    w.data_claim(selector, config.brokerStorageClass, config.brokerStorageSize)
                ],
            ),
            opts=child,
        )
        w.disruption_budget(name, w.metadata(names.broker, namespace, selector), child)
        self.register_outputs({"serviceHost": self.service_host, "replicas": self.replicas})

    @staticmethod
    def _account(
        name: str, layout: KubeLayout, selector: dict[str, str], opts: pulumi.ResourceOptions
    ) -> core.ServiceAccount:
        """Peer discovery reads one Endpoints object; the account may do nothing else."""
        names, namespace = layout.names, layout.names.namespace
        account = w.service_account(names.broker, namespace, selector, True, opts)
        role = rbac.Role(
            f"{name}-discovery",
            metadata=w.metadata(f"{names.broker}-discovery", namespace, selector),
            rules=[
                rbac.PolicyRuleArgs(
                    api_groups=[""],
                    resources=["endpoints"],
                    resource_names=[names.broker_nodes],
                    verbs=["get"],
                )
            ],
            opts=opts,
        )
        rbac.RoleBinding(
            f"{name}-discovery",
            metadata=w.metadata(f"{names.broker}-discovery", namespace, selector),
            role_ref=rbac.RoleRefArgs(
                api_group="rbac.authorization.k8s.io",
                kind="Role",
                name=role.metadata.apply(lambda m: str(m.name)),
            ),
            subjects=[
                rbac.SubjectArgs(kind="ServiceAccount", name=names.broker, namespace=namespace)
            ],
            opts=opts,
        )
        return account

    @staticmethod
    def _pod(
        *,
        layout: KubeLayout,
        config: KubeStackConfig,
        config_secret: pulumi.Output[str],
        config_files: list[str],  # every file of the config Secret, mounted by its path
        cookie_secret: pulumi.Output[str],
        tls_secret: pulumi.Input[str],
        account: pulumi.Output[str],
    ) -> core.PodSpecArgs:
        names = layout.names
        node_host = f"$(POD_NAME).{names.service_host(names.broker_nodes)}"
        env = [
            w.pod_name_env(),
            w.secret_key_env(COOKIE_ENV, cookie_secret, "cookie"),
            core.EnvVarArgs(name="RABBITMQ_USE_LONGNAME", value="true"),
            core.EnvVarArgs(name="RABBITMQ_NODENAME", value=f"rabbit@{node_host}"),
            core.EnvVarArgs(name="RABBITMQ_CONFIG_FILE", value=f"{PATHS.config}/{CONF}"),
            core.EnvVarArgs(
                name="RABBITMQ_ENABLED_PLUGINS_FILE", value=f"{PATHS.config}/{PLUGINS}"
            ),
            # The Erlang arguments of the node and the CLI tools (TLS, cookie) are there.
            core.EnvVarArgs(name="RABBITMQ_CONF_ENV_FILE", value=f"{PATHS.config}/{ENV_FILE}"),
            core.EnvVarArgs(name="RABBITMQ_LOGS", value="-"),
            core.EnvVarArgs(name="HOME", value=DATA_DIR),
        ]
        broker = core.ContainerArgs(
            name="rabbitmq",
            image=config.brokerImage,
            env=env,
            ports=[
                core.ContainerPortArgs(name=key, container_port=port)
                for key, port in sorted(BROKER_PORTS.items())
            ],
            volume_mounts=[
                w.mount("config", PATHS.config),
                w.mount("tls", f"{PATHS.state}/tls"),
                w.mount("data", DATA_DIR, read_only=False),
                w.mount("tmp", "/tmp", read_only=False),
            ],
            resources=w.resources(config.brokerCpu, config.brokerMemory),
            security_context=w.container_security(),
            startup_probe=core.ProbeArgs(
                tcp_socket=core.TCPSocketActionArgs(port="amqps"),
                period_seconds=10,
                failure_threshold=60,  # first boot imports definitions and forms the cluster
            ),
            readiness_probe=w.exec_probe(["rabbitmq-diagnostics", "-q", "check_port_connectivity"]),
            liveness_probe=w.exec_probe(["rabbitmq-diagnostics", "-q", "ping"], period=60),
        )
        return core.PodSpecArgs(
            service_account_name=account,
            automount_service_account_token=True,  # peer discovery calls the API
            security_context=w.pod_security(RABBITMQ_USER),
            affinity=w.spread(w.labels(names.stack, "broker")),
            containers=[broker],
            volumes=[
                w.files_volume("config", config_secret, config_files),
                w.tls_volume("tls", tls_secret),
                w.empty_dir("tmp"),
            ],
            termination_grace_period_seconds=120,  # quorum queues hand leadership over
        )


def _tls_dist_file(layout: KubeLayout) -> str:
    (broker,) = (b for b in layout.stack.spec.brokers if b.name == BROKER_NAME)
    return inter_node_tls_file(broker)


def _port(name: str) -> core.ServicePortArgs:
    return w.service_port(name, BROKER_PORTS[name])
