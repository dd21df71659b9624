"""Live apply on Kubernetes under the mock runtime: a model change that only touches
addresses, policies or users updates the routers' Secrets in place and leaves their pod
template as it was (nothing rolls); a change a reload cannot make still rolls the pods."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from enmesh.compile import compile_stack_file
from enmesh.compile.engines import Engine
from enmesh.k8s import live
from enmesh.k8s.capture import Capture
from enmesh.k8s.schema import pod_spec
from tests.pulumi.conftest import ROOT, capture_of, run_with
from tests.pulumi.test_program import _model_variant, _one, _volumes
from tests.support.apply_target import SHOP


def _router_rollout(capture: Capture, stack: str = "local") -> tuple[str, Any, dict[str, str]]:
    """The config Secret's name, the routers' pod template, the Secret's files."""
    router = _one(capture, "StatefulSet", f"{stack}-router")
    name = capture.outputs["routerConfigSecret"]
    assert _volumes(router)["config"]["secret"]["secretName"] == name  # the one that exists
    return name, router["spec"]["template"], _one(capture, "Secret", name)["stringData"]


def test_an_address_change_updates_the_config_secret_in_place_and_rolls_no_pod(
    tmp_path: Path,
) -> None:
    # The routers' own policies hold the users' rights (with Keycloak, its groups do).
    sasldb = {"identity": "sasldb"}
    base = _router_rollout(run_with("local", models=[_model_variant(tmp_path, 3, 1)], **sasldb))
    again = _router_rollout(run_with("local", models=[_model_variant(tmp_path, 3, 1)], **sasldb))
    changed_model = _model_variant(tmp_path, 3, 1, extra="prices")
    changed = _router_rollout(run_with("local", models=[changed_model], **sasldb))
    assert base == again  # deterministic
    assert changed[0] == base[0] == "local-router-config"  # one Secret, updated in place
    assert changed[1] == base[1]  # the same pod template: nothing rolls
    conf = "routers_local-router-0.conf"
    assert "acme/prices" in changed[2][conf] and "acme/prices" not in base[2][conf]
    # a user's rights change too: the policies file changes, the pod template does not
    model = Path(changed_model)
    text = model.read_text(encoding="utf-8")
    rights = "addresses: [commands, broadcast, alerts]"
    # (the new address is acme's; iot.backend is given an iot address it lacked)
    model.write_text(text.replace(rights, rights.replace("alerts", "alerts, readings")))
    rights_changed = _router_rollout(run_with("local", models=[str(model)], **sasldb))
    policies = "auth_policies_vhosts.json"
    assert rights_changed[2][policies] != changed[2][policies]
    assert rights_changed[1] == base[1]
    assert set(changed[2]) == set(base[2])  # the same files: the volume's items stay
    container = base[1]["spec"]["containers"][0]
    command = container["command"]
    assert command[command.index("--watch-config") + 1] == "2"  # it reloads the swap
    store = command[command.index("--will-store") + 1]  # wills on a writable emptyDir
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert store.startswith(mounts["wills"]["mountPath"] + "/")
    assert not mounts["wills"].get("readOnly", False)


QDR = "registry.example/qdr:1.19"


def test_a_change_a_reload_cannot_make_still_rolls_the_pods(tmp_path: Path) -> None:
    _, artefacts = compile_stack_file(ROOT / "stacks" / "local.stack.yml")
    files = artefacts.files
    base = live.restart_hash(files, Engine.ENMESH_ROUTER)
    conf = "routers/local-router-0.conf"
    for before, after in (
        ("    port: 5671\n", "    port: 5681\n"),  # a listener rebinds
        ("    mode: interior\n", "    mode: edge\n"),  # the router's own identity
    ):
        assert before in files[conf]
        changed = {**files, conf: files[conf].replace(before, after)}
        assert live.restart_hash(changed, Engine.ENMESH_ROUTER) != base, after
    address = files[conf] + "\naddress {\n    prefix: iot/extra\n    distribution: balanced\n}\n"
    assert live.restart_hash({**files, conf: address}, Engine.ENMESH_ROUTER) == base
    # qdrouterd reads its config at start-up only: any change rolls its pods
    model = [_model_variant(tmp_path, 3, 1)]
    qdr = _router_rollout(
        run_with("local", models=model, routerEngine="qdrouterd", routerImage=QDR)
    )
    more = [_model_variant(tmp_path, 3, 1, extra="prices")]
    qdr_changed = _router_rollout(
        run_with("local", models=more, routerEngine="qdrouterd", routerImage=QDR)
    )
    assert qdr_changed[1] != qdr[1] and qdr[1] != base[1]
    assert "--watch-config" not in str(qdr[1])


def test_a_new_tenant_and_user_reach_the_routers_without_new_pods(tmp_path: Path) -> None:
    base_model = _model_variant(tmp_path, 3, 1)
    base = run_with("local", models=[base_model])
    more = tmp_path / "with-shop.yml"  # a tenant, an anycast and a queue address, a user
    more.write_text(Path(base_model).read_text(encoding="utf-8") + SHOP, encoding="utf-8")
    changed = run_with("local", models=[str(more)])
    assert _router_rollout(changed)[1] == _router_rollout(base)[1]  # no pod rolls

    def logins(capture: Capture) -> set[str]:
        return set(_one(capture, "Secret", "local-router-users")["stringData"])

    assert logins(changed) - logins(base) == {"shop-clerk_password"}
    assert "enmesh-stack-admin_password" in logins(base)
    assert "clerk@shop" in _router_rollout(changed)[2]["deploy.json"]
    router = _one(changed, "StatefulSet", "local-router")
    sync = {c["name"]: c for c in pod_spec(router)["initContainers"]}["sasldb-sync"]  # type: ignore[index]
    assert sync["restartPolicy"] == "Always"  # a sidecar: it keeps the database current
    assert sync["command"][-4:] == ["--flat-secrets", "/etc/enmesh-users", "--watch", "5"]


def test_every_vhost_policy_reaches_the_routers_in_one_file() -> None:
    _, _, files = _router_rollout(capture_of("local"))
    vhosts = {entry[1]["hostname"] for entry in json.loads(files["auth_policies_vhosts.json"])}
    assert vhosts == {"$default", "acme", "iot"}
    assert not [key for key in files if key.startswith("auth_policies_") and "vhosts" not in key]
