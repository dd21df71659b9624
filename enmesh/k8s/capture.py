"""Run the Pulumi program under Pulumi's mock runtime and capture what it would create.

There is no cluster and no Pulumi CLI here (nor on a reviewer's laptop, often): the mocks
play the engine, answering each registration with its inputs plus the outputs a real
provider would fill in (certificates, passwords, load balancer addresses). Every Kubernetes
object comes back as the manifest the provider would apply.
"""

from __future__ import annotations

import base64
import hashlib
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import rpc, settings
from pulumi.runtime.config import set_all_config
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from enmesh.k8s.config import as_pulumi_config, read_stack_file

K8S_PREFIX = "kubernetes:"
PROJECT = "enmesh"


@dataclass(frozen=True)
class Registered:
    type: str
    name: str
    inputs: dict[str, Any]


@dataclass
class Capture:
    resources: list[Registered] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)
    secrets: set[str] = field(default_factory=set)  # every generated secret literal

    @property
    def objects(self) -> list[dict[str, Any]]:
        """Kubernetes manifests (apiVersion, kind, metadata, ...), sorted for stable output."""
        objects = [r.inputs for r in self.resources if _is_object(r.type)]
        return sorted(objects, key=object_key)

    def of_type(self, type_: str) -> list[Registered]:
        return [r for r in self.resources if r.type == type_]

    def kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o.get("kind") == kind]


def object_key(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = obj.get("metadata") or {}
    return (str(obj.get("kind")), str(meta.get("namespace", "")), str(meta.get("name", "")))


def _is_object(type_: str) -> bool:
    return type_.startswith(K8S_PREFIX)  # providers are `pulumi:providers:kubernetes`


def as_manifest(value: Any) -> Any:
    """Inputs as the provider would send them: secrets unwrapped from Pulumi's wire marker,
    and whole numbers as integers (the wire format carries every number as a double)."""
    if isinstance(value, dict):
        if value.get(rpc._special_sig_key) == rpc._special_secret_sig:
            return as_manifest(value["value"])
        return {key: as_manifest(item) for key, item in value.items()}
    if isinstance(value, list):
        return [as_manifest(item) for item in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _mock_secret(label: str) -> str:
    """A recognisable, unique, deterministic stand-in for a generated secret."""
    return "mocksecret" + hashlib.sha256(label.encode()).hexdigest()[:24]


class EngineMocks(pulumi_mocks.Mocks):
    """Answers like the providers would, and records every registration."""

    def __init__(self, capture: Capture) -> None:
        self.capture = capture

    def new_resource(
        self, args: pulumi_mocks.MockResourceArgs
    ) -> tuple[str | None, dict[str, Any]]:
        inputs = as_manifest(dict(args.inputs))
        self.capture.resources.append(Registered(args.typ, args.name, inputs))
        state = dict(inputs)
        state.update(self._outputs(args.typ, args.name, inputs))
        if _is_object(args.typ):
            meta = dict(state.get("metadata") or {})
            meta.setdefault("name", args.name)
            state["metadata"] = meta
        return f"{args.name}-id", state

    def _outputs(self, type_: str, name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
        secret = _mock_secret(f"{type_}/{name}")
        if type_ == "random:index/randomPassword:RandomPassword":
            value = secret[: int(inputs.get("length", 32))]
            self.capture.secrets.add(value)
            return {"result": value}
        if type_ == "random:index/randomBytes:RandomBytes":
            raw = hashlib.sha256(secret.encode()).digest()[: int(inputs["length"])]
            self.capture.secrets.add(base64.b64encode(raw).decode())
            return {"base64": base64.b64encode(raw).decode(), "hex": raw.hex()}
        if type_ == "tls:index/privateKey:PrivateKey":
            key = f"-----BEGIN PRIVATE KEY-----\n{secret}\n-----END PRIVATE KEY-----\n"
            self.capture.secrets.add(secret)
            return {"privateKeyPem": key, "publicKeyPem": f"PUBLIC {name}"}
        if type_ in {
            "tls:index/selfSignedCert:SelfSignedCert",
            "tls:index/locallySignedCert:LocallySignedCert",
        }:
            return {"certPem": f"-----BEGIN CERTIFICATE-----\n{name}\n-----END CERTIFICATE-----\n"}
        if type_ == "tls:index/certRequest:CertRequest":
            return {"certRequestPem": f"CSR {name}"}
        if type_ == "kubernetes:core/v1:Service":
            return _service_outputs(name, inputs)
        if type_ == "eks:index:Cluster":
            kubeconfig = f'{{"apiVersion": "v1", "kind": "Config", "token": "{secret}"}}'
            self.capture.secrets.add(secret)
            return {"kubeconfigJson": kubeconfig, "kubeconfig": kubeconfig}
        if type_ == "gcp:container/cluster:Cluster":
            return {"endpoint": "203.0.113.10", "masterAuth": {"clusterCaCertificate": "Q0E="}}
        return {}

    def call(
        self, args: pulumi_mocks.MockCallArgs
    ) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        if args.token == "azure-native:containerservice:listManagedClusterUserCredentials":
            secret = _mock_secret("aks-kubeconfig")
            self.capture.secrets.add(secret)
            kubeconfig = base64.b64encode(f"apiVersion: v1\nkind: Config\n# {secret}\n".encode())
            return {"kubeconfigs": [{"name": "clusterUser", "value": kubeconfig.decode()}]}, []
        return {}, []


def _service_outputs(name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
    spec = dict(inputs.get("spec") or {})
    kind = spec.get("type", "ClusterIP")
    if kind in {"NodePort", "LoadBalancer"}:
        spec["ports"] = [
            {**port, "nodePort": 30000 + i} for i, port in enumerate(spec.get("ports") or [])
        ]
    status: dict[str, Any] = {}
    if kind == "LoadBalancer":
        status = {"loadBalancer": {"ingress": [{"hostname": f"{name}.lb.example.net"}]}}
    return {"spec": spec, "status": status}


@contextmanager
def _program_path(project_dir: Path) -> Iterator[None]:
    path = str(project_dir / "pulumi")
    sys.path.insert(0, path)
    try:
        yield
    finally:
        sys.path.remove(path)


def run_program(
    project_dir: Path,
    stack: str,
    config: Mapping[str, Any] | None = None,
    capture: Capture | None = None,
) -> Capture:
    """Run `pulumi/` for `stack` under mocks; `config` replaces the stack file when given."""
    values = read_stack_file(project_dir, stack) if config is None else dict(config)
    capture = Capture() if capture is None else capture
    pulumi_mocks.set_mocks(EngineMocks(capture), project=PROJECT, stack=stack, preview=False)
    set_all_config(as_pulumi_config(values))
    exported: dict[str, Any] = {}

    def program() -> None:
        from enmesh_k8s.program import build  # noqa: PLC0415  (needs pulumi/ on sys.path)

        exported.update(build())

    with _program_path(project_dir):
        try:
            _sync_await(run_pulumi_func(program))
            capture.outputs = _sync_await(_resolve(exported))
        finally:
            settings.reset_options()
    return capture


async def _resolve(values: Mapping[str, Any]) -> dict[str, Any]:
    resolved = {}
    for key, value in values.items():
        output = pulumi.Output.from_input(value)
        resolved[key] = await output.future()
    return resolved
