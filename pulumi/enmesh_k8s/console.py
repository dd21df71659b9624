"""`Console`: enmesh-console as a Deployment behind a ClusterIP Service (HTTPS, 8443).

The console is a reader of the stack (docs/console.md), run with `--kubernetes`:
- the model: the stack file this program compiled and its model files, in the ConfigMap
  `<stack>-console` under a fixed name, so after a model change in `pulumi up` the
  kubelet refreshes the mounted files without a restart and the console's model cache
  follows them;
- each router's AMQP management, by its pod's own DNS name through the headless
  `<stack>-router-mesh`: the same ConfigMap holds a `deploy.json` of the console's own
  (the routers' ids, hosts and amqps port, and the CA it trusts), read at start, so a
  change of the plans' router count rolls the pod (`enmesh.io/restart-hash`);
- Prometheus, when `consolePrometheus` names one (charts, messages stored).
Logins are SASL connections (PLAIN over TLS) to the routers, as on hosts; with Keycloak and
`consoleUrl`, users may log in through Keycloak too (enmesh.console.oidc). Model changes
are refused: on Kubernetes they are `pulumi up`'s. Closing a connection is a management
write to a router and works. One replica: sessions live in the console's memory.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from enmesh.compile.identity import CONSOLE_SECRET, REALM
from enmesh.k8s.config import KubeStackConfig
from enmesh.k8s.layout import KEYCLOAK_HTTPS, KubeLayout
from enmesh_k8s import workload as w
from enmesh_k8s.tls import CA_FILE

core = k8s.core.v1
CONSOLE_USER = 10000  # the enmesh image's uid
PORT = 8443
CERTIFICATE = "console"
TLS_DIR = "/etc/enmesh-console-tls"
CONFIG_DIR = "/etc/enmesh-console"  # --config-dir and --stacks-dir: the ConfigMap
OIDC_DIR = "/etc/enmesh-console-oidc"  # its Keycloak client's secret
LOGIN_PAGE = "/login"  # needs no session: what the probes ask for


def console_name(stack: str) -> str:
    return f"{stack}-console"


def certificate_names(layout: KubeLayout, dns_names: list[str]) -> list[str]:
    """Its Service, in and outside the cluster, and `localhost` for `kubectl port-forward`."""
    service = console_name(layout.names.stack)
    return sorted({service, layout.names.service_host(service), "localhost", *dns_names})


def console_deployment(layout: KubeLayout, config: KubeStackConfig) -> dict[str, Any]:
    """The console's `deploy.json`: every router the autoscaler may start, by pod name,
    and the CA of their certificates (the client certificates carry the pod names). With
    Keycloak, the administrator logs in on the amqp port (the routers' own database); with
    `consoleUrl` too, users may log in through Keycloak (its URL as browsers reach it)."""
    ports = ("amqps", "amqp")
    routers = [
        {"id": r["id"], "host": r["host"], "ports": {p: r["ports"][p] for p in ports}}
        for r in layout.deployment["routers"]
    ]
    return {
        "stack": layout.names.stack,
        "ca": f"{TLS_DIR}/{CA_FILE}",
        "routers": routers,
        "identity": _identity(layout, config),
    }


def _identity(layout: KubeLayout, config: KubeStackConfig) -> dict[str, Any]:
    identity: dict[str, Any] = {"provider": layout.deployment["identity"]["provider"]}
    if config.consoleUrl and config.dnsNames:
        identity["keycloak"] = {
            "url": f"https://{config.dnsNames[0]}:{KEYCLOAK_HTTPS}",
            "realm": REALM,
        }
        identity["consoleSecret"] = f"{OIDC_DIR}/{CONSOLE_SECRET[1]}"
    return identity


def config_files(layout: KubeLayout, config: KubeStackConfig, models: list[Path]) -> dict[str, str]:
    """ConfigMap data: `<stack>.stack.yml` naming the model files beside it, the model
    files, and `deploy.json`."""
    names = [model.name for model in models]
    if len(set(names)) != len(names):
        raise pulumi.RunError(
            f"the console needs model files of distinct names, got {', '.join(names)}"
        )
    stack = layout.stack.model_dump(mode="json", exclude_none=True)
    stack["spec"]["models"] = names
    files = {model.name: model.read_text(encoding="utf-8") for model in models}
    files[f"{layout.names.stack}.stack.yml"] = yaml.safe_dump(stack, sort_keys=False)
    files["deploy.json"] = json.dumps(console_deployment(layout, config), indent=1, sort_keys=True)
    return files


def command(layout: KubeLayout, config: KubeStackConfig) -> list[str]:
    found = [
        "enmesh-console",
        "--kubernetes",
        f"--stack={layout.names.stack}",
        f"--stacks-dir={CONFIG_DIR}",
        f"--config-dir={CONFIG_DIR}",
        "--host=0.0.0.0",
        f"--port={PORT}",
        f"--cert={TLS_DIR}/{CERTIFICATE}.crt",
        f"--key={TLS_DIR}/{CERTIFICATE}.key",
    ]
    administrator = layout.deployment.get("administrator")
    if administrator:
        found.append(f"--administrator={administrator['identity']}")
    if config.consolePrometheus:
        found.append(f"--prometheus={config.consolePrometheus}")
    if config.consoleUrl:
        found.append(f"--public-url={config.consoleUrl.rstrip('/')}")
    return found


class Console(pulumi.ComponentResource):
    service: core.Service
    url: str  # inside the cluster

    def __init__(
        self,
        name: str,
        *,
        layout: KubeLayout,
        config: KubeStackConfig,
        models: list[Path],
        tls_secret: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("enmesh:k8s:Console", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        names = layout.names
        selector, object_meta, account = w.identity(
            names.stack, names.namespace, "console", console_name(names.stack), child
        )
        files = config_files(layout, config, models)
        config_map = core.ConfigMap(f"{name}-config", metadata=object_meta, data=files, opts=child)
        restart = hashlib.sha256(files["deploy.json"].encode()).hexdigest()[:16]
        oidc = "consoleSecret" in console_deployment(layout, config)["identity"]
        container = core.ContainerArgs(
            name="console",
            image=config.toolsImage,
            command=command(layout, config),
            ports=[core.ContainerPortArgs(name="https", container_port=PORT)],
            volume_mounts=[
                w.mount("tls", TLS_DIR),
                w.mount("config", CONFIG_DIR),
                w.mount("tmp", "/tmp", read_only=False),  # the model check's scratch files
                *([w.mount("oidc", OIDC_DIR)] if oidc else []),
            ],
            resources=w.resources("250m", "256Mi"),
            security_context=w.container_security(),
            readiness_probe=w.http_probe("https", LOGIN_PAGE, "HTTPS"),
            liveness_probe=w.http_probe("https", LOGIN_PAGE, "HTTPS"),
        )
        k8s.apps.v1.Deployment(
            name,
            metadata=object_meta,
            spec=k8s.apps.v1.DeploymentSpecArgs(
                replicas=1,  # sessions are in memory: one console
                selector=k8s.meta.v1.LabelSelectorArgs(match_labels=selector),
                template=core.PodTemplateSpecArgs(
                    metadata=k8s.meta.v1.ObjectMetaArgs(
                        labels=selector, annotations={"enmesh.io/restart-hash": restart}
                    ),
                    spec=core.PodSpecArgs(
                        service_account_name=account,
                        automount_service_account_token=False,
                        security_context=w.pod_security(CONSOLE_USER),
                        containers=[container],
                        volumes=[
                            w.tls_volume("tls", tls_secret),
                            core.VolumeArgs(
                                name="config",
                                config_map=core.ConfigMapVolumeSourceArgs(
                                    name=config_map.metadata.apply(lambda m: str(m.name))
                                ),
                            ),
                            w.empty_dir("tmp"),
                            # the console's OIDC client secret, the stack's generated one
                            *([w.tls_volume("oidc", CONSOLE_SECRET[0])] if oidc else []),
                        ],
                        termination_grace_period_seconds=10,
                    ),
                ),
            ),
            opts=child,
        )
        self.service = core.Service(
            f"{name}-service",
            metadata=object_meta,
            spec=core.ServiceSpecArgs(
                type="ClusterIP",  # an administration page: port-forward or your own ingress
                selector=selector,
                ports=[w.service_port("https", PORT)],
            ),
            opts=child,
        )
        self.url = f"https://{names.service_host(console_name(names.stack))}:{PORT}"
        self.register_outputs({"url": self.url})
