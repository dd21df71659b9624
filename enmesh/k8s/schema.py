"""Every captured object against the Kubernetes JSON schemas, plus enmesh's own rules.

kubernetes-validate carries the schemas per Kubernetes version; the stack's
`kubernetesVersion` picks them; the Prometheus operator's kinds are checked against
`monitoring_schema`. Our rules on top: every container (init containers too)
has requests and limits and a non-root, read-only, no-escalation securityContext, and
every long-running container has readiness and liveness probes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import jsonschema
import kubernetes_validate
from kubernetes_validate.utils import all_versions

from enmesh.k8s import monitoring_schema
from enmesh.k8s.capture import object_key


def schema_version(minor: str) -> str:
    """ "1.33" -> the newest bundled "1.33.x"; unknown versions are an error."""
    candidates = sorted(
        (v for v in set(all_versions()) if v.startswith(f"{minor}.")),
        key=lambda v: int(v.rsplit(".", 1)[1]),
    )
    if not candidates:
        known = sorted({".".join(v.split(".")[:2]) for v in all_versions()}, key=_minor_key)
        raise ValueError(
            f"no Kubernetes schemas for version {minor} (kubernetes-validate has "
            f"{known[0]}..{known[-1]})"
        )
    return str(candidates[-1])


def _minor_key(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def _name(obj: Mapping[str, Any]) -> str:
    kind, namespace, name = object_key(obj)
    return f"{kind} {namespace + '/' if namespace else ''}{name}"


def schema_problems(objects: Iterable[Mapping[str, Any]], minor: str) -> list[str]:
    version = schema_version(minor)
    problems = []
    for obj in objects:
        if obj.get("apiVersion") == monitoring_schema.API_VERSION:
            problems += _custom_problems(obj)
            continue
        try:
            kubernetes_validate.validate(dict(obj), version, strict=True)
        except kubernetes_validate.ValidationError as error:
            path = "/".join(str(p) for p in error.path)
            problems.append(f"{_name(obj)}: {path}: {error.message[:300]}")
        except kubernetes_validate.SchemaNotFoundError as error:
            problems.append(f"{_name(obj)}: no schema ({error})")
    return problems


def _custom_problems(obj: Mapping[str, Any]) -> list[str]:
    """A Prometheus operator object against the schema of its kind (monitoring_schema)."""
    schema = monitoring_schema.SCHEMAS.get(str(obj.get("kind")))
    if schema is None:
        return [f"{_name(obj)}: no schema (kinds: {', '.join(sorted(monitoring_schema.SCHEMAS))})"]
    validator = jsonschema.Draft7Validator(schema)
    return [
        f"{_name(obj)}: {'/'.join(str(p) for p in error.absolute_path)}: {error.message[:300]}"
        for error in sorted(validator.iter_errors(dict(obj)), key=lambda e: str(e.absolute_path))
    ]


def pod_spec(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if obj.get("kind") in {"StatefulSet", "Deployment", "DaemonSet", "Job"}:
        return obj["spec"]["template"]["spec"]  # type: ignore[no-any-return]
    return None


def containers(obj: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(`init` or `main`, container) of a workload object."""
    spec = pod_spec(obj)
    if spec is None:
        return
    for container in spec.get("initContainers") or []:
        yield "init", container
    for container in spec.get("containers") or []:
        yield "main", container


def hardening_problems(objects: Iterable[Mapping[str, Any]]) -> list[str]:
    problems = []
    for obj in objects:
        for role, container in containers(obj):
            where = f"{_name(obj)} container {container.get('name')}"
            kind = "task" if obj.get("kind") == "Job" else role  # runs to its end: no probes
            problems += [f"{where}: {p}" for p in _container_problems(kind, container)]
    return problems


def _container_problems(role: str, container: Mapping[str, Any]) -> Iterator[str]:
    resources = container.get("resources") or {}
    for bound in ("requests", "limits"):
        for resource in ("cpu", "memory"):
            if resource not in (resources.get(bound) or {}):
                yield f"no {resource} {bound}"
    security = container.get("securityContext") or {}
    expected = {
        "runAsNonRoot": True,
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
    }
    for key, value in expected.items():
        if security.get(key) is not value:
            yield f"securityContext.{key} is {security.get(key)!r}, expected {value!r}"
    if "ALL" not in ((security.get("capabilities") or {}).get("drop") or []):
        yield "capabilities not dropped"
    if role == "main":
        for probe in ("readinessProbe", "livenessProbe"):
            if probe not in container:
                yield f"no {probe}"
