"""`RouterMesh`: the compiled router configs running as a StatefulSet.

Pod `<stack>-router-<i>` runs `routers/<stack>-router-<i>.conf` (its compiled id is its pod
name). The configs live in one Secret, `<stack>-router-config`, updated in place by a model
change; enmesh-router watches its mounted files and reloads them live (`enmesh.k8s.live`).
The pod template carries a hash of only what a reload cannot change (the router's identity
and listeners, or everything for an engine that cannot reload), so only such a change rolls
the routers, one by one. An init container builds the SASL database with `enmesh deploy
sasldb` from `<stack>-router-users` (every login's password, updated in place), and a
sidecar rebuilds it when users or passwords change: a new user rolls no pod either.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from enmesh.deploy.sasldb import flat_secret_key
from enmesh.k8s import live
from enmesh.k8s.config import KubeStackConfig, RouterEngine
from enmesh.k8s.layout import PATHS, PORTS, KubeLayout
from enmesh_k8s import workload as w

core = k8s.core.v1
USERS_DIR = "/etc/enmesh-users"  # every login's password, `<secret>_<key>`
SASLDB_WATCH_SECONDS = 5
ROUTER_USER = 10000  # skupper-router's and enmesh's images both run as this uid
COMMANDS = {
    RouterEngine.SKUPPER_ROUTER: ["skrouterd", "-c"],
    RouterEngine.QDROUTERD: ["qdrouterd", "-c"],
    RouterEngine.ENMESH_ROUTER: ["enmesh-router", "--config"],
}
WILLS_DIR = f"{PATHS.state}/wills"
# Login throttling, handshake limits, the will store: enmesh-router only (qdrouterd has none).
EXTRA_ARGS: dict[RouterEngine, list[str]] = {
    RouterEngine.SKUPPER_ROUTER: [],
    RouterEngine.QDROUTERD: [],
    RouterEngine.ENMESH_ROUTER: [
        "--admission",
        f"{PATHS.config}/auth/admission.json",
        "--watch-config",  # the Secret is updated in place: reload what kubelet swaps in
        str(live.WATCH_SECONDS),
        "--will-store",  # clients' wills outlive a container restart (not the pod's loss)
        f"{WILLS_DIR}/wills.sqlite3",
    ],
}


class RouterMesh(pulumi.ComponentResource):
    config_secret_name: pulumi.Output[str]
    client_service: core.Service
    endpoint: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        *,
        layout: KubeLayout,
        config: KubeStackConfig,
        tls_secret: pulumi.Input[str],
        credentials: Mapping[str, str],  # Secret name -> key, mounted under PATHS.secrets
        passwords: Mapping[str, pulumi.Input[str]],  # Secret name -> its password
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("enmesh:k8s:RouterMesh", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        names, namespace = layout.names, layout.names.namespace
        selector = w.labels(names.stack, "router")
        files = live.config_files(layout.artefacts.files)
        restart_hash = live.restart_hash(layout.artefacts.files, config.routerEngine)
        config_secret = core.Secret(  # one name, updated in place: no new pod template
            f"{name}-config",
            metadata=w.metadata(f"{names.router}-config", namespace, selector),
            type="Opaque",
            string_data={w.secret_file_key(path): text for path, text in files.items()},
            opts=child,
        )
        self.config_secret_name = config_secret.metadata.apply(lambda m: str(m.name))
        # Every login's password in one Secret mounted whole: a new user changes its
        # contents, not the pod template; a sidecar rebuilds the SASL database from it.
        logins = _login_secrets(layout.deployment)
        users_secret = core.Secret(
            f"{name}-users",
            metadata=w.metadata(f"{names.router}-users", namespace, selector),
            type="Opaque",
            string_data={flat_secret_key(s, credentials[s]): passwords[s] for s in logins},
            opts=child,
        )
        services = {s: k for s, k in credentials.items() if s not in logins}
        account = w.service_account(names.router, namespace, selector, False, child)
        core.Service(
            f"{name}-mesh",
            metadata=w.metadata(names.router_mesh, namespace, selector),
            spec=core.ServiceSpecArgs(
                cluster_ip="None",
                publish_not_ready_addresses=True,  # peers must resolve before they are ready
                selector=selector,
                ports=[w.service_port("inter-router", PORTS["interRouter"])],
            ),
            opts=child,
        )
        self.client_service = core.Service(
            f"{name}-client",
            metadata=w.metadata(names.messaging, namespace, selector),
            spec=core.ServiceSpecArgs(
                type=config.provider.client_service_type,
                selector=selector,
                ports=[
                    w.service_port("amqps", PORTS["amqps"]),
                    w.service_port("amqp", PORTS["amqp"]),
                ],
            ),
            opts=child,
        )
        statefulset = k8s.apps.v1.StatefulSet(
            name,
            metadata=w.metadata(names.router, namespace, selector),
            spec=k8s.apps.v1.StatefulSetSpecArgs(
                service_name=names.router_mesh,
                replicas=layout.router_min,
                pod_management_policy="Parallel",
                selector=k8s.meta.v1.LabelSelectorArgs(match_labels=selector),
                template=core.PodTemplateSpecArgs(
                    metadata=k8s.meta.v1.ObjectMetaArgs(
                        labels=selector, annotations={"enmesh.io/restart-hash": restart_hash}
                    ),
                    spec=self._pod(
                        layout=layout,
                        config=config,
                        config_secret=config_secret,
                        users_secret=users_secret,
                        tls_secret=tls_secret,
                        credentials=services,
                        account=account,
                    ),
                ),
            ),
            # The autoscaler owns the replica count once the StatefulSet exists.
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["spec.replicas"]),
        )
        w.disruption_budget(name, w.metadata(names.router, namespace, selector), child)
        autoscaling = k8s.autoscaling.v2
        autoscaling.HorizontalPodAutoscaler(
            name,
            metadata=w.metadata(names.router, namespace, selector),
            spec=autoscaling.HorizontalPodAutoscalerSpecArgs(
                scale_target_ref=autoscaling.CrossVersionObjectReferenceArgs(
                    api_version="apps/v1", kind="StatefulSet", name=names.router
                ),
                min_replicas=layout.router_min,
                max_replicas=layout.router_max,  # routers beyond the plan have no config
                metrics=[
                    autoscaling.MetricSpecArgs(
                        type="Resource",
                        resource=autoscaling.ResourceMetricSourceArgs(
                            name="cpu",
                            target=autoscaling.MetricTargetArgs(
                                type="Utilization", average_utilization=70
                            ),
                        ),
                    )
                ],
            ),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[statefulset]),
        )
        self.endpoint = _endpoint(self.client_service, config.provider.managed)
        self.register_outputs({"endpoint": self.endpoint, "configSecret": self.config_secret_name})

    @staticmethod
    def _pod(
        *,
        layout: KubeLayout,
        config: KubeStackConfig,
        config_secret: core.Secret,
        users_secret: core.Secret,
        tls_secret: pulumi.Input[str],
        credentials: Mapping[str, str],
        account: core.ServiceAccount,
    ) -> core.PodSpecArgs:
        tls_dir = str(PurePosixPath(layout.deployment["ca"]).parent)
        sasldb_dir = str(PurePosixPath(layout.deployment["sasldb"]).parent)
        secret_name = config_secret.metadata.apply(lambda m: str(m.name))
        files = sorted(live.config_files(layout.artefacts.files))
        volumes = [
            w.files_volume("config", secret_name, files),
            w.tls_volume("tls", tls_secret),
            _credentials_volume("credentials", credentials),
            w.tls_volume("users", users_secret.metadata.apply(lambda m: str(m.name))),
            w.empty_dir("sasldb"),
            w.empty_dir("tmp"),
            w.empty_dir("wills"),
        ]
        config_mounts = [
            w.mount("config", PATHS.config),
            w.mount("credentials", PATHS.secrets),
            w.mount("tmp", "/tmp", read_only=False),
        ]
        conf = f"{PATHS.config}/routers/$(POD_NAME).conf"
        build = ["enmesh", "deploy", "sasldb", "--config-dir", PATHS.config]
        build += ["--flat-secrets", USERS_DIR]
        sasldb_mounts = [
            *config_mounts,
            w.mount("users", USERS_DIR),
            w.mount("sasldb", sasldb_dir, read_only=False),
        ]
        sasldb = core.ContainerArgs(
            name="sasldb",
            image=config.toolsImage,
            command=build,
            volume_mounts=sasldb_mounts,
            resources=w.resources("100m", "128Mi"),
            security_context=w.container_security(),
        )
        # A native sidecar (an init container that keeps running, Kubernetes >= 1.29):
        # users and passwords changed in place reach the database within seconds.
        sasldb_sync = core.ContainerArgs(
            name="sasldb-sync",
            image=config.toolsImage,
            command=[*build, "--watch", str(SASLDB_WATCH_SECONDS)],
            restart_policy="Always",
            volume_mounts=sasldb_mounts,
            resources=w.resources("50m", "96Mi"),
            security_context=w.container_security(),
        )
        router = core.ContainerArgs(
            name="router",
            image=config.router_image,
            command=[*COMMANDS[config.routerEngine], conf, *EXTRA_ARGS[config.routerEngine]],
            env=[w.pod_name_env()],
            ports=[
                core.ContainerPortArgs(name=_port_name(key), container_port=port)
                for key, port in sorted(PORTS.items())
            ],
            volume_mounts=[
                *config_mounts,
                w.mount("tls", tls_dir),
                w.mount("sasldb", sasldb_dir),
                w.mount("wills", WILLS_DIR, read_only=False),
            ],
            resources=w.resources(config.routerCpu, config.routerMemory),
            security_context=w.container_security(),
            readiness_probe=w.tcp_probe("amqps", period=5),
            liveness_probe=w.http_probe("metrics", "/metrics"),
        )
        return core.PodSpecArgs(
            service_account_name=account.metadata.apply(lambda m: str(m.name)),
            automount_service_account_token=False,
            security_context=w.pod_security(ROUTER_USER),
            affinity=w.spread(w.labels(layout.names.stack, "router")),
            init_containers=[sasldb, sasldb_sync],
            containers=[router],
            volumes=volumes,
            termination_grace_period_seconds=30,
        )


def _login_secrets(deployment: Mapping[str, Any]) -> list[str]:
    """The Secrets of everyone who logs in to the routers: users and the administrator."""
    found = {u["secret"] for u in deployment["users"]}
    if "administrator" in deployment:
        found.add(deployment["administrator"]["secret"])
    return sorted(found)


def _port_name(key: str) -> str:
    return {"interRouter": "inter-router"}.get(key, key)


def _credentials_volume(name: str, credentials: Mapping[str, str]) -> core.VolumeArgs:
    """Every user's Secret as `<secret>/<key>`, the layout the compiled files reference."""
    return core.VolumeArgs(
        name=name,
        projected=core.ProjectedVolumeSourceArgs(
            default_mode=0o440,
            sources=[
                core.VolumeProjectionArgs(
                    secret=core.SecretProjectionArgs(
                        name=secret, items=[core.KeyToPathArgs(key=key, path=f"{secret}/{key}")]
                    )
                )
                for secret, key in sorted(credentials.items())
            ],
        ),
    )


def _endpoint(service: core.Service, load_balanced: bool) -> pulumi.Output[str]:
    """`amqps://<load balancer>:5671` on clouds, `amqps://<any node>:<nodePort>` elsewhere."""
    if load_balanced:
        return service.status.apply(lambda status: f"amqps://{_ingress(status)}:{PORTS['amqps']}")
    return service.spec.apply(lambda spec: f"amqps://<node address>:{_node_port(spec, 'amqps')}")


def _ingress(status: core.outputs.ServiceStatus | None) -> str:
    ingress = (status.load_balancer.ingress if status and status.load_balancer else None) or []
    if not ingress:
        return "<pending load balancer>"
    return str(ingress[0].hostname or ingress[0].ip)


def _node_port(spec: core.outputs.ServiceSpec, name: str) -> str:
    for port in spec.ports or []:
        if port.name == name and port.node_port:
            return str(port.node_port)
    return "<node port>"
