"""A Kubernetes stack's config (`stacks/Pulumi.<stack>.yaml`, namespace `enmesh:`), validated.

Pulumi hands the program flat `enmesh:<key>` strings (arrays as JSON). Everything is checked
here before any resource is registered, and a problem names the key, what was expected and
what was found, so `pulumi up` stops before it changes anything.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    model_validator,
)

from enmesh.compile.engines import Engine
from enmesh.compile.stack import IdentityProvider, TlsVersion

NAMESPACE = "enmesh"
Quantity = Annotated[str, StringConstraints(pattern=r"^[0-9]+(\.[0-9]+)?(m|Ki|Mi|Gi|Ti)?$")]
DnsLabel = Annotated[
    str, StringConstraints(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
]
ServicePort = Annotated[int, Field(ge=0, le=65535)]
ConsoleUrl = Annotated[str, StringConstraints(pattern=r"^https://[^/?#\s]+/?$")]
PrometheusUrl = Annotated[str, StringConstraints(pattern=r"^https?://[^/?#\s]+(/[^?#\s]*)?$")]
DnsName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9*]([-a-z0-9.]*[a-z0-9])?$")]
KubernetesVersion = Annotated[str, StringConstraints(pattern=r"^1\.[0-9]{2}$")]
_LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
# `key=value` (Pulumi.yaml config has no object type): a Kubernetes label key and value.
LabelPair = Annotated[
    str,
    StringConstraints(
        pattern=rf"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?{_LABEL_NAME}=({_LABEL_NAME})?$"
    ),
]


class KubeStackError(ValueError):
    """A Kubernetes stack that cannot be rendered; the message says what and where."""


class StackConfigError(KubeStackError):
    """A stack config that does not validate; the message names every bad key."""


class Provider(StrEnum):
    LOCAL = "local"  # kind / minikube / OpenShift Local: an existing kubeconfig context
    BAREMETAL = "baremetal"  # an existing cluster on premise
    AWS = "aws"  # EKS, created by the stack
    AZURE = "azure"  # AKS
    GCP = "gcp"  # GKE

    @property
    def managed(self) -> bool:
        """True where the stack creates the cluster itself."""
        return self in {Provider.AWS, Provider.AZURE, Provider.GCP}

    @property
    def client_service_type(self) -> str:
        """How clients reach the stack: a cloud load balancer, else a port on every node."""
        return "LoadBalancer" if self.managed else "NodePort"


# The compiler's engines: the configs are compiled for and checked against the one chosen.
RouterEngine = Engine
ENMESH_IMAGE = "ghcr.io/enmesh/enmesh:0.1.0"
# qdrouterd has no official image: a stack that runs it names its own (routerImage).
DEFAULT_IMAGES = {
    RouterEngine.ENMESH_ROUTER: ENMESH_IMAGE,
    RouterEngine.SKUPPER_ROUTER: "quay.io/skupper/skupper-router:3.4.1",
}
CLOUD_ONLY = ("region", "nodeCount", "nodeSize", "gcpProject")


class KubeStackConfig(BaseModel):
    """Every `enmesh:` key a Kubernetes stack understands; Pulumi.yaml documents each."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    provider: Provider
    models: list[str] = Field(default_factory=lambda: ["iot.model.yml"], min_length=1)
    namespace: DnsLabel = "enmesh"
    kubernetesVersion: KubernetesVersion = "1.33"  # noqa: N815
    clusterDomain: str = "cluster.local"  # noqa: N815
    kubeContext: str | None = None  # noqa: N815
    dnsNames: list[DnsName] = Field(default_factory=list)  # noqa: N815
    tlsMinVersion: TlsVersion = TlsVersion.TLS_1_2  # noqa: N815  (the stack's `tls.minVersion`)
    # enmesh-router serves every model; skupper-router 3.x no address space (no multiTenant).
    routerEngine: RouterEngine = RouterEngine.ENMESH_ROUTER  # noqa: N815
    routerImage: str | None = None  # noqa: N815
    toolsImage: str = ENMESH_IMAGE  # noqa: N815
    routerMinReplicas: Annotated[int, Field(ge=1, le=64)] = 2  # noqa: N815
    routerCpu: Quantity = "250m"  # noqa: N815
    routerMemory: Quantity = "256Mi"  # noqa: N815
    brokerImage: str = "rabbitmq:3.13.7"  # noqa: N815
    brokerReplicas: Annotated[int, Field(ge=1, le=9)] | None = None  # noqa: N815
    brokerStorageClass: str | None = None  # noqa: N815
    brokerStorageSize: Quantity = "10Gi"  # noqa: N815
    brokerCpu: Quantity = "500m"  # noqa: N815
    brokerMemory: Quantity = "1Gi"  # noqa: N815
    # keycloak: the routers ask Keycloak through enmesh-auth; sasldb: their own database
    # (no Keycloak, enmesh-auth or PostgreSQL deployed).
    identity: IdentityProvider = IdentityProvider.KEYCLOAK
    # The release the hosts run (enmesh.deploy.keycloak_dist.VERSION): enmesh's provider
    # is compiled against the image's own jars, in `jdkImage`, by an init container.
    keycloakImage: str = "quay.io/keycloak/keycloak:26.5.6"  # noqa: N815
    jdkImage: str = "eclipse-temurin:21-jdk"  # noqa: N815
    postgresImage: str = "postgres:16.6"  # noqa: N815
    keycloakStorageSize: Quantity = "5Gi"  # noqa: N815
    # The cluster runs the Prometheus operator: PodMonitor, ServiceMonitor, PrometheusRule.
    prometheusOperator: bool = False  # noqa: N815
    # Labels the operator's Prometheus selects monitors and rules by (e.g. release: ...).
    monitorLabels: list[LabelPair] = Field(default_factory=list)  # noqa: N815
    # The web console (enmesh-console): reads, and closes connections; no model changes.
    console: bool = True
    # A Prometheus that scrapes the stack, for the console's charts and stored counts.
    consolePrometheus: PrometheusUrl | None = None  # noqa: N815
    # Where browsers reach the console (`https://localhost:8443` through `kubectl
    # port-forward`, or your ingress): with Keycloak, its login through Keycloak (OIDC)
    # redirects back there. Browsers must reach Keycloak too, by `dnsNames`.
    consoleUrl: ConsoleUrl | None = None  # noqa: N815
    region: str | None = None
    nodeCount: Annotated[int, Field(ge=1, le=100)] | None = None  # noqa: N815
    nodeSize: str | None = None  # noqa: N815
    gcpProject: str | None = None  # noqa: N815
    # The MQTT gateway's Service ports, what devices connect to; 0 leaves that listener out.
    mqttPort: ServicePort = 1883  # noqa: N815
    mqttsPort: ServicePort = 8883  # noqa: N815
    mqttWsPort: ServicePort = 8083  # noqa: N815
    mqttWssPort: ServicePort = 8084  # noqa: N815

    @model_validator(mode="after")
    def _provider_keys(self) -> KubeStackConfig:
        problems = []
        if self.provider.managed:
            needed = ["region", "nodeCount", "nodeSize"]
            if self.provider is Provider.GCP:
                needed.append("gcpProject")
            problems += [
                f"{NAMESPACE}:{key}: required on {self.provider} stacks"
                for key in needed
                if getattr(self, key) is None
            ]
            if self.kubeContext is not None:
                problems.append(
                    f"{NAMESPACE}:kubeContext: only for local and baremetal stacks "
                    f"(a {self.provider} stack creates its cluster)"
                )
        else:
            problems += [
                f"{NAMESPACE}:{key}: only for cloud stacks (aws, azure, gcp), not {self.provider}"
                for key in CLOUD_ONLY
                if getattr(self, key) is not None
            ]
        if self.provider is not Provider.GCP and self.gcpProject is not None:
            problems.append(f"{NAMESPACE}:gcpProject: only for gcp stacks")
        if self.routerImage is None and self.routerEngine not in DEFAULT_IMAGES:
            problems.append(
                f"{NAMESPACE}:routerImage: required with routerEngine {self.routerEngine} "
                "(there is no default image for it)"
            )
        if self.monitorLabels and not self.prometheusOperator:
            problems.append(
                f"{NAMESPACE}:monitorLabels: only with {NAMESPACE}:prometheusOperator: true "
                "(without the operator no monitors are created)"
            )
        if self.consolePrometheus is not None and not self.console:
            problems.append(
                f"{NAMESPACE}:consolePrometheus: only with {NAMESPACE}:console: true "
                "(the console is its only reader)"
            )
        problems += self._console_url_problems()
        problems += self._mqtt_port_problems()
        if problems:
            raise ValueError("; ".join(sorted(set(problems))))
        return self

    def _console_url_problems(self) -> list[str]:
        if self.consoleUrl is None:
            return []
        key = f"{NAMESPACE}:consoleUrl"
        if not self.console or self.identity is not IdentityProvider.KEYCLOAK:
            return [
                f"{key}: only with {NAMESPACE}:console: true and {NAMESPACE}:identity: "
                "keycloak (it is where Keycloak sends a browser back after its login)"
            ]
        if not self.dnsNames:
            return [
                f"{key}: browsers must reach Keycloak's login page too: give "
                f"{NAMESPACE}:dnsNames the name it is reached by"
            ]
        return []

    def _mqtt_port_problems(self) -> list[str]:
        ports = [self.mqttPort, self.mqttsPort, self.mqttWsPort, self.mqttWssPort]
        keys = "mqttPort, mqttsPort, mqttWsPort, mqttWssPort"
        given = [port for port in ports if port]
        if not given:
            return [f"{NAMESPACE}:{keys}: at least one MQTT listener must stay (not all 0)"]
        if len(set(given)) < len(given):
            return [f"{NAMESPACE}:{keys}: two MQTT listeners share a port"]
        return []

    @property
    def mqtt_service_ports(self) -> dict[str, int]:
        """The gateway's listeners (mqtt, mqtts, ws, wss) and their Service ports."""
        ports = {
            "mqtt": self.mqttPort,
            "mqtts": self.mqttsPort,
            "ws": self.mqttWsPort,
            "wss": self.mqttWssPort,
        }
        return {kind: port for kind, port in ports.items() if port}

    @property
    def router_image(self) -> str:
        return self.routerImage or DEFAULT_IMAGES[self.routerEngine]  # checked above

    @property
    def monitor_labels(self) -> dict[str, str]:
        return {key: value for key, _, value in (p.partition("=") for p in self.monitorLabels)}


def _decode(value: Any) -> Any:
    """Pulumi passes arrays and objects as JSON text; plain strings stay as they are."""
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def parse_config(raw: Mapping[str, Any], source: str) -> KubeStackConfig:
    """`{"enmesh:provider": "aws", ...}` -> a validated config; other namespaces are ignored."""
    values = {
        key.split(":", 1)[1]: _decode(value)
        for key, value in raw.items()
        if key.startswith(f"{NAMESPACE}:")
    }
    try:
        return KubeStackConfig.model_validate(values)
    except ValidationError as error:
        raise StackConfigError(_describe(error, source)) from None


def _describe(error: ValidationError, source: str) -> str:
    lines = [f"{source}: invalid stack config"]
    for problem in error.errors():
        where = ".".join(str(part) for part in problem["loc"])
        message = problem["msg"].removeprefix("Value error, ")
        if where:
            found = problem.get("input")
            lines.append(f"  {NAMESPACE}:{where}: {message} (got {found!r})")
        else:
            lines.extend(f"  {part}" for part in message.split("; "))
    return "\n".join(lines)


def read_stack_file(project_dir: Path, stack: str) -> dict[str, Any]:
    """The `config:` map of `stacks/Pulumi.<stack>.yaml`, with Pulumi.yaml's defaults under it."""
    path = project_dir / "stacks" / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        known = sorted(
            p.name.removeprefix("Pulumi.").removesuffix(".yaml")
            for p in (project_dir / "stacks").glob("Pulumi.*.yaml")
        )
        raise StackConfigError(
            f"no Kubernetes stack {stack!r}: {path} does not exist "
            f"(known: {', '.join(known) or 'none'})"
        )
    project = yaml.safe_load((project_dir / "Pulumi.yaml").read_text(encoding="utf-8"))
    values: dict[str, Any] = {}
    for key, spec in (project.get("config") or {}).items():
        if isinstance(spec, dict) and "default" in spec:
            values[key if ":" in key else f"{NAMESPACE}:{key}"] = spec["default"]
    document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(document, dict) or not isinstance(document.get("config", {}), dict):
        raise StackConfigError(f"{path}: expected a mapping with a `config:` mapping")
    for key, value in (document.get("config") or {}).items():
        if isinstance(value, dict) and "secure" in value:
            raise StackConfigError(
                f"{path}: {key} is an encrypted secret; rendering without the Pulumi CLI "
                "cannot decrypt it"
            )
        values[key] = value
    return values


def as_pulumi_config(values: Mapping[str, Any]) -> dict[str, str]:
    """Config as the Pulumi runtime holds it: strings, arrays and objects as JSON."""
    return {
        key: value if isinstance(value, str) else json.dumps(value) for key, value in values.items()
    }
