"""`enmesh render --stack NAME --k8s-out DIR`: the Kubernetes objects a stack would create.

The program runs under Pulumi's mocks; every object must pass the Kubernetes schemas of
the stack's version and enmesh's container rules, or nothing is written. Generated secret
values in the output are mock stand-ins and are replaced by `<generated>`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from enmesh.k8s.capture import Capture, object_key, run_program
from enmesh.k8s.config import KubeStackError, parse_config, read_stack_file
from enmesh.k8s.schema import hardening_problems, schema_problems

GENERATED = "<generated>"


class KubeRenderError(KubeStackError):
    """The model or the generated objects are not valid."""


@dataclass(frozen=True)
class KubeRender:
    files: list[str]
    changed: list[str]
    removed: list[str]
    outputs: dict[str, Any]


def capture_stack(project_dir: Path, stack: str) -> tuple[Capture, str]:
    """Run the stack's program under mocks; returns the capture and its Kubernetes version."""
    import pulumi  # noqa: PLC0415  (heavy; only this command needs it)

    values = read_stack_file(project_dir, stack)
    config = parse_config(values, f"stacks/Pulumi.{stack}.yaml")
    try:
        capture = run_program(project_dir, stack, values)
    except pulumi.RunError as error:
        raise KubeRenderError(str(error)) from None
    return capture, config.kubernetesVersion


def _redact(value: Any, secrets: set[str]) -> Any:
    if isinstance(value, dict):
        return {key: _redact(item, secrets) for key, item in value.items()}
    if isinstance(value, list):
        return [_redact(item, secrets) for item in value]
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, GENERATED)
    return value


def file_name(obj: dict[str, Any]) -> str:
    kind, namespace, name = object_key(obj)
    return f"{namespace or '_cluster'}/{kind.lower()}-{name}.yaml"


def render_kubernetes(project_dir: Path, stack: str, out: Path) -> KubeRender:
    capture, version = capture_stack(project_dir, stack)
    problems = schema_problems(capture.objects, version) + hardening_problems(capture.objects)
    if problems:
        raise KubeRenderError(
            f"stack {stack!r}: {len(problems)} invalid object(s):\n  " + "\n  ".join(problems)
        )
    wanted = {
        file_name(obj): yaml.safe_dump(_redact(obj, capture.secrets), sort_keys=True)
        for obj in capture.objects
    }
    changed = []
    for relative, text in sorted(wanted.items()):
        path = out / relative
        if path.is_file() and path.read_text(encoding="utf-8") == text:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        changed.append(relative)
    removed = sorted(
        str(p.relative_to(out))
        for p in out.glob("*/*.yaml")
        if str(p.relative_to(out)) not in wanted
    )
    for relative in removed:
        (out / relative).unlink()
    outputs = _redact(
        {k: v for k, v in capture.outputs.items() if k != "kubeconfig"}, capture.secrets
    )
    return KubeRender(sorted(wanted), changed, removed, outputs)
