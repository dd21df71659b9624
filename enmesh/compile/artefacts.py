"""Compile a stack into its artefacts and write them to a directory.

Artefacts are a mapping of relative path -> text. Writing is atomic per file and
removes files that an earlier render wrote but this one no longer produces (tracked
in `manifest.json`), so the output directory is always exactly the current render.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from enmesh.compile import (
    administrator,
    admission,
    auth,
    broker,
    deploy,
    identity,
    monitoring,
    router,
)
from enmesh.compile.broker_nodes import (
    broker_nodes,
    inter_node_tls_file,
    speaks_tls_distribution,
)
from enmesh.compile.engines import profile_of
from enmesh.compile.engines.check import policy_problems, refuse_unserved, require_valid
from enmesh.compile.layout import Layout
from enmesh.compile.ports import check_ports
from enmesh.compile.stack import Stack, load_stack
from enmesh.gcpause import paused_gc
from enmesh.model import Model, load_model
from enmesh.mqtt.topics import ADDRESSES_FILE

MANIFEST = "manifest.json"


def to_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


@dataclass(frozen=True)
class Artefacts:
    files: dict[str, str]  # relative path -> content

    def manifest(self) -> dict[str, Any]:
        return {
            "files": {
                path: hashlib.sha256(text.encode()).hexdigest()
                for path, text in sorted(self.files.items())
            }
        }

    def content_hash(self, *prefixes: str) -> str:
        """Short hash of the files under any of `prefixes` (all files if none), for names
        that change with content."""
        digest = hashlib.sha256()
        for path, text in sorted(self.files.items()):
            if path.startswith(prefixes or ("",)):
                digest.update(path.encode() + b"\0" + text.encode() + b"\0")
        return digest.hexdigest()[:10]


def _address_index(layout: Layout) -> dict[str, dict[str, str]]:
    """Each space's addresses and types: the MQTT gateway matches wildcard filters to them."""
    return {
        tenant.name: {a.spec.address: str(a.spec.type) for a in tenant.addresses}
        for tenant in layout.standard_tenants
    }


def compile_model(stack: Stack, model: Model) -> Artefacts:
    with paused_gc():
        return _compile(Layout(stack, model))


def _compile(layout: Layout) -> Artefacts:
    stack = layout.stack
    profile = profile_of(stack.spec.routers.engine)
    refuse_unserved(layout, profile)  # before anything is written: name what is missing
    check_ports(layout)
    broker.check_broker_addresses(layout)
    files: dict[str, str] = {}
    for router_id, conf in router.render_routers(layout).items():
        files[f"routers/{router_id}.conf"] = conf
    for spec in stack.spec.brokers:
        files[f"brokers/{spec.name}.definitions.json"] = to_json(
            broker.broker_definitions(layout, spec.name)
        )
        for node in broker_nodes(spec):
            files[node.config] = broker.rabbitmq_conf(layout, node)
        if speaks_tls_distribution(spec):
            files[inter_node_tls_file(spec)] = broker.inter_node_tls(layout, spec)
    files["auth/users.json"] = to_json(auth.users(layout))
    files["auth/sasl2/qdrouterd.conf"] = auth.sasl_config(layout)
    files[admission.ADMISSION_FILE] = to_json(admission.admission(stack.spec.security))
    for tenant in layout.standard_tenants:
        keycloak = identity.uses_keycloak(layout)
        policy = auth.vhost_policy(tenant, listed_users=not keycloak)
        if keycloak:  # what Keycloak's groups grant, read by the smoke check, not the routers
            files[f"{identity.RIGHTS_DIR}/{tenant.name}.json"] = to_json(auth.vhost_policy(tenant))
        where = f"auth/policies/{tenant.name}.json"
        require_valid(policy_problems(profile, policy, where), profile)
        files[where] = to_json(policy)
    policy = administrator.policy()
    require_valid(policy_problems(profile, policy, administrator.POLICY_FILE), profile)
    files[administrator.POLICY_FILE] = to_json(policy)
    if monitoring.enabled(layout):
        files[monitoring.CONFIG_FILE] = to_json(monitoring.prometheus_config(layout))
        files[monitoring.RULES_FILE] = to_json(monitoring.rules(layout))
    files[ADDRESSES_FILE] = to_json(_address_index(layout))
    files["deploy.json"] = to_json(deploy.deployment(layout))
    return Artefacts(dict(sorted(files.items())))


def compile_stack_file(path: Path) -> tuple[Stack, Artefacts]:
    stack, model_files = load_stack(path)
    return stack, compile_model(stack, load_model(model_files))


def _write_atomically(path: Path, text: str) -> bool:
    """Write if different; returns whether the file changed."""
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    temporary.replace(path)
    return True


def _previous_files(out: Path) -> Iterable[str]:
    try:
        manifest = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
        return list(manifest.get("files", {}))
    except (OSError, ValueError, AttributeError):
        return []


def write_artefacts(artefacts: Artefacts, out: Path) -> list[str]:
    """Write every artefact under `out`; returns the relative paths that changed."""
    changed = [rel for rel, text in artefacts.files.items() if _write_atomically(out / rel, text)]
    for stale in sorted(set(_previous_files(out)) - set(artefacts.files)):
        target = out / stale
        if target.is_file():
            target.unlink()
            changed.append(stale)
    _write_atomically(out / MANIFEST, to_json(artefacts.manifest()))
    return changed
