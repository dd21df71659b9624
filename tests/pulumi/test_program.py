"""The Kubernetes program under Pulumi's mocks: what exists per stack and how it is wired."""

from __future__ import annotations

import json
import re
from pathlib import Path, PurePosixPath
from typing import Any

import pulumi
import pytest

from enmesh.k8s.capture import Capture, run_program
from enmesh.k8s.config import KubeStackConfig, parse_config, read_stack_file
from enmesh.k8s.schema import containers, hardening_problems, pod_spec, schema_problems
from tests.pulumi.conftest import CLOUDS, ROOT, STACKS, capture_of, config_with, run_with

MANAGED = {
    "aws": "eks:index:Cluster",
    "azure": "azure-native:containerservice:ManagedCluster",
    "gcp": "gcp:container/cluster:Cluster",
}


def _config(stack: str) -> KubeStackConfig:
    return parse_config(read_stack_file(ROOT, stack), stack)


def _one(capture: Capture, kind: str, name: str) -> dict[str, Any]:
    found = [o for o in capture.kind(kind) if o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind} {name}: {len(found)} found"
    return found[0]


def _volumes(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    spec = pod_spec(obj)
    assert spec is not None
    return {v["name"]: v for v in spec["volumes"]}


def _mounts(obj: dict[str, Any], container: str) -> dict[str, str]:
    spec = pod_spec(obj)
    assert spec is not None
    found = [c for c in spec["containers"] if c["name"] == container]
    return {m["name"]: m["mountPath"] for m in found[0]["volumeMounts"]}


# --- every object, every stack --------------------------------------------------------


def test_every_object_validates_against_the_kubernetes_schemas(stack: str) -> None:
    capture = capture_of(stack)
    assert len(capture.objects) > 30
    assert schema_problems(capture.objects, _config(stack).kubernetesVersion) == []


def test_the_schema_check_rejects_a_broken_object() -> None:
    statefulset = dict(_one(capture_of("local"), "StatefulSet", "local-router"))
    broken = {**statefulset, "spec": {**statefulset["spec"], "replicas": "three"}}
    problems = schema_problems([broken], "1.33")
    assert len(problems) == 1
    assert "StatefulSet enmesh/local-router: spec/replicas" in problems[0]


def test_every_container_is_limited_probed_and_unprivileged(stack: str) -> None:
    capture = capture_of(stack)
    workloads = [o for o in capture.objects if pod_spec(o) is not None]
    assert {o["kind"] for o in workloads} == {"StatefulSet", "Deployment", "Job"}
    # router (+ its sasldb init container and sidecar), rabbitmq, keycloak (+ the two init
    # containers that build enmesh's provider, and its realm sync Job), postgres,
    # enmesh-auth, mqtt gateway, console
    assert sum(1 for o in workloads for _ in containers(o)) == 12
    assert hardening_problems(capture.objects) == []
    for obj in workloads:
        spec = pod_spec(obj)
        assert spec is not None
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] > 0


def test_the_hardening_check_names_what_is_missing() -> None:
    statefulset = json.loads(json.dumps(_one(capture_of("local"), "StatefulSet", "local-router")))
    container = statefulset["spec"]["template"]["spec"]["containers"][0]
    del container["livenessProbe"]
    container["securityContext"]["runAsNonRoot"] = False
    del container["resources"]["limits"]
    problems = hardening_problems([statefulset])
    where = "StatefulSet enmesh/local-router container router"
    assert f"{where}: no livenessProbe" in problems
    assert f"{where}: securityContext.runAsNonRoot is False, expected True" in problems
    assert f"{where}: no cpu limits" in problems


def test_no_generated_secret_appears_outside_a_secret(stack: str) -> None:
    capture = capture_of(stack)
    assert len(capture.secrets) >= 10  # passwords, keys, cookie, salt
    for obj in capture.objects:
        if obj["kind"] == "Secret":
            continue
        text = json.dumps(obj)
        leaked = [s for s in capture.secrets if s in text]
        assert not leaked, f"{obj['kind']} {obj['metadata']['name']} holds a secret"
    plain_outputs = json.dumps({k: v for k, v in capture.outputs.items() if k != "kubeconfig"})
    assert not [s for s in capture.secrets if s in plain_outputs]


def test_passwords_reach_containers_only_by_secret_reference(stack: str) -> None:
    for obj in capture_of(stack).objects:
        for _, container in containers(obj):
            for env in container.get("env", []):
                if re.search("PASSWORD|COOKIE", env["name"]):
                    assert "value" not in env, env
                    assert env["valueFrom"]["secretKeyRef"]["name"]


# --- per stack differences ----------------------------------------------------------


def test_managed_cluster_resources_only_on_cloud_stacks(stack: str) -> None:
    capture = capture_of(stack)
    types = {r.type for r in capture.resources}
    for cloud, cluster_type in MANAGED.items():
        assert (cluster_type in types) == (cloud == stack), cluster_type
    providers = capture.of_type("pulumi:providers:kubernetes")
    assert len(providers) == 1
    if stack in CLOUDS:
        assert "kubeconfig" in capture.outputs
        assert providers[0].inputs.get("kubeconfig")
    else:
        assert "kubeconfig" not in capture.outputs
        assert providers[0].inputs["context"] == _config(stack).kubeContext


def test_gke_gets_a_node_pool_sized_from_config() -> None:
    pools = capture_of("gcp").of_type("gcp:container/nodePool:NodePool")
    assert len(pools) == 1
    assert pools[0].inputs["nodeCount"] == _config("gcp").nodeCount
    assert pools[0].inputs["nodeConfig"]["machineType"] == "e2-standard-4"


def test_eks_and_aks_nodes_sized_from_config() -> None:
    eks = capture_of("aws").of_type("eks:index:Cluster")[0].inputs
    assert (eks["instanceType"], eks["desiredCapacity"]) == ("m6i.large", 3)
    aks = capture_of("azure").of_type("azure-native:containerservice:ManagedCluster")[0].inputs
    pool = aks["agentPoolProfiles"][0]
    assert (pool["vmSize"], pool["count"]) == ("Standard_D4s_v5", 3)


def test_client_service_is_a_load_balancer_on_clouds_and_a_node_port_elsewhere(
    stack: str,
) -> None:
    capture = capture_of(stack)
    service = _one(capture, "Service", f"{stack}-messaging")
    expected = "LoadBalancer" if stack in CLOUDS else "NodePort"
    assert service["spec"]["type"] == expected
    assert {p["name"] for p in service["spec"]["ports"]} == {"amqps", "amqp"}
    endpoint = capture.outputs["endpoint"]
    if stack in CLOUDS:
        assert endpoint == "amqps://router-client.lb.example.net:5671"
    else:
        assert re.fullmatch(r"amqps://<node address>:3\d{4}", endpoint)
    broker = _one(capture, "Service", f"{stack}-broker")
    assert broker["spec"].get("type", "ClusterIP") == "ClusterIP"


# --- wiring -------------------------------------------------------------------------------


def _secret_files(capture: Capture, name: str) -> set[str]:
    return set(_one(capture, "Secret", name)["stringData"])


def test_tls_secrets_are_mounted_where_the_compiled_configs_read_them(stack: str) -> None:
    capture = capture_of(stack)
    router = _one(capture, "StatefulSet", f"{stack}-router")
    volumes, mounts = _volumes(router), _mounts(router, "router")
    assert volumes["tls"]["secret"]["secretName"] == f"{stack}-router-tls"
    config_secret = _one(capture, "Secret", capture.outputs["routerConfigSecret"])
    conf = config_secret["stringData"][f"routers_{stack}-router-0.conf"]
    referenced = set(re.findall(r"(?:caCertFile|certFile|privateKeyFile): (\S+)", conf))
    assert len(referenced) == 5  # the CA, and a certificate and key per TLS profile
    tls_keys = _secret_files(capture, f"{stack}-router-tls")
    for path in referenced:
        assert str(PurePosixPath(path).parent) == mounts["tls"]
        assert PurePosixPath(path).name in tls_keys
    broker = _one(capture, "StatefulSet", f"{stack}-broker")
    broker_conf = next(
        v
        for k, v in _one(capture, "Secret", _volumes(broker)["config"]["secret"]["secretName"])[
            "stringData"
        ].items()
        if k.endswith(".rabbitmq.conf")
    )
    broker_keys = _secret_files(capture, f"{stack}-broker-tls")
    for path in re.findall(r"ssl_options\.(?:cacertfile|certfile|keyfile) = (\S+)", broker_conf):
        assert str(PurePosixPath(path).parent) == _mounts(broker, "rabbitmq")["tls"]
        assert PurePosixPath(path).name in broker_keys
    keycloak = _one(capture, "Deployment", f"{stack}-keycloak")
    assert _volumes(keycloak)["tls"]["secret"]["secretName"] == f"{stack}-keycloak-tls"
    assert {"keycloak.crt", "keycloak.key", "ca.crt"} <= _secret_files(
        capture, f"{stack}-keycloak-tls"
    )


def test_router_certificates_carry_the_names_clients_and_peers_use() -> None:
    capture = capture_of("aws")
    requests = {r.name: r.inputs for r in capture.of_type("tls:index/certRequest:CertRequest")}
    client = requests["tls-router-0-client"]["dnsNames"]
    assert "messaging.example.com" in client  # the stack's dnsNames
    assert "aws-messaging.enmesh.svc.cluster.local" in client
    assert {"iot", "acme"} <= set(client)  # AMQP virtual hosts
    inter = requests["tls-router-1-inter-router"]["dnsNames"]
    assert "aws-router-1.aws-router-mesh.enmesh.svc.cluster.local" in inter
    broker = requests["tls-broker-cluster"]["dnsNames"]
    assert "aws-broker.enmesh.svc.cluster.local" in broker


def test_each_router_pod_runs_its_own_compiled_config(stack: str) -> None:
    capture = capture_of(stack)
    router = _one(capture, "StatefulSet", f"{stack}-router")
    container = pod_spec(router)["containers"][0]  # type: ignore[index]
    assert container["command"][:3] == [
        "enmesh-router",
        "--config",
        "/etc/enmesh/routers/$(POD_NAME).conf",
    ]
    items = _volumes(router)["config"]["secret"]["items"]
    paths = {i["path"] for i in items}
    hpa = _one(capture, "HorizontalPodAutoscaler", f"{stack}-router")
    # a config for every pod the autoscaler may start, named as the pods are
    assert {f"routers/{stack}-router-{i}.conf" for i in range(hpa["spec"]["maxReplicas"])} <= paths
    assert router["spec"]["replicas"] == hpa["spec"]["minReplicas"]
    assert hpa["spec"]["maxReplicas"] == 3  # the iot plan allows 3 routers
    init = pod_spec(router)["initContainers"][0]  # type: ignore[index]
    assert init["command"][:3] == ["enmesh", "deploy", "sasldb"]


def test_the_router_engine_picks_the_image_and_command() -> None:
    container = pod_spec(_one(capture_of("local"), "StatefulSet", "local-router"))["containers"][0]  # type: ignore[index]
    assert container["image"] == "ghcr.io/enmesh/enmesh:0.1.0"
    assert container["command"][0] == "enmesh-router"
    capture = run_with("local", routerEngine="qdrouterd", routerImage="registry.example/qdr:1.19")
    qdrouterd = pod_spec(_one(capture, "StatefulSet", "local-router"))["containers"][0]  # type: ignore[index]
    assert qdrouterd["command"][:2] == ["qdrouterd", "-c"]
    assert qdrouterd["image"] == "registry.example/qdr:1.19"


def _model_variant(tmp_path: Path, routers: int, brokers: int, extra: str | None = None) -> str:
    """The iot model with other plan limits and, optionally, one more anycast address."""
    text = (ROOT / "stacks" / "iot.model.yml").read_text(encoding="utf-8")
    text = re.sub(
        r"resourceLimits: \{connections: 1000, addresses: 50, routers: 3, brokers: 1\}",
        "resourceLimits: {connections: 1000, addresses: 50, "
        f"routers: {routers}, brokers: {brokers}}}",
        text,
    )
    if extra is not None:
        text += (
            "---\napiVersion: enmesh.io/v1\nkind: Address\n"
            f"metadata: {{name: acme.{extra}}}\n"
            f"spec: {{addressSpace: acme, address: {extra}, type: anycast, "
            "plan: standard-anycast}\n"
        )
    path = tmp_path / f"model-{routers}-{brokers}-{extra}.yml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_broker_nodes_and_router_bounds_come_from_the_plan(tmp_path: Path) -> None:
    capture = run_with("local", models=[_model_variant(tmp_path, 5, 3)], brokerReplicas=None)
    broker = _one(capture, "StatefulSet", "local-broker")
    assert broker["spec"]["replicas"] == 3
    assert capture.outputs["brokerReplicas"] == 3
    hpa = _one(capture, "HorizontalPodAutoscaler", "local-router")
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (1, 5)
    configs = capture.outputs["routerConfigSecret"]
    assert "routers_local-router-4.conf" in _one(capture, "Secret", configs)["stringData"]
    # the stack config overrides the plan's broker count
    assert _one(capture_of("aws"), "StatefulSet", "aws-broker")["spec"]["replicas"] == 3
    assert _one(capture_of("local"), "StatefulSet", "local-broker")["spec"]["replicas"] == 1


def test_brokers_cluster_with_quorum_queues_on_volumes_of_the_stack_storage_class() -> None:
    capture = capture_of("aws")
    broker = _one(capture, "StatefulSet", "aws-broker")
    claim = broker["spec"]["volumeClaimTemplates"][0]["spec"]
    assert claim["storageClassName"] == "gp2"
    assert claim["resources"]["requests"]["storage"] == "10Gi"
    config = _one(capture, "Secret", _volumes(broker)["config"]["secret"]["secretName"])
    conf = config["stringData"]["brokers_broker-cluster.rabbitmq.conf"]
    assert "cluster_formation.peer_discovery_backend = kubernetes" in conf
    assert "cluster_formation.k8s.service_name = aws-broker-nodes" in conf
    definitions = json.loads(config["stringData"]["brokers_broker-cluster.definitions.json"])
    assert {q["arguments"]["x-queue-type"] for q in definitions["queues"]} == {"quorum"}
    assert [u["name"] for u in definitions["users"]] == ["enmesh-router"]
    assert "password" not in definitions["users"][0]
    role = _one(capture, "Role", "aws-broker-discovery")
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["endpoints"],
            "resourceNames": ["aws-broker-nodes"],
            "verbs": ["get"],
        }
    ]


def test_only_the_brokers_service_account_gets_an_api_token(stack: str) -> None:
    capture = capture_of(stack)
    tokens = {
        o["metadata"]["name"]: o.get("automountServiceAccountToken")
        for o in capture.kind("ServiceAccount")
    }
    assert tokens == {
        f"{stack}-broker": True,
        f"{stack}-router": False,
        f"{stack}-keycloak": False,
        f"{stack}-keycloak-db": False,
        f"{stack}-keycloak-sync": False,
        f"{stack}-auth": False,
        f"{stack}-mqtt": False,
        f"{stack}-console": False,
    }


def test_network_policies_let_only_routers_reach_brokers(stack: str) -> None:
    capture = capture_of(stack)
    policies = {o["metadata"]["name"]: o["spec"] for o in capture.kind("NetworkPolicy")}
    assert policies[f"{stack}-default-deny"] == {
        "podSelector": {},
        "policyTypes": ["Ingress"],
        "ingress": [],
    }
    broker_rules = policies[f"{stack}-broker"]["ingress"]
    amqps = [r for r in broker_rules if {"port": 5671, "protocol": "TCP"} in r["ports"]]
    sources = [peer for rule in amqps for peer in rule["from"]]
    assert sources
    assert all(
        peer["podSelector"]["matchLabels"]["app.kubernetes.io/name"] in {"router", "broker"}
        for peer in sources
    )
    open_rules = [
        rule
        for spec in policies.values()
        for rule in spec.get("ingress", [])
        if any("ipBlock" in peer for peer in rule["from"])
    ]
    open_ports = sorted(p["port"] for rule in open_rules for p in rule["ports"])
    # router AMQP, the MQTT gateway (TCP, TLS, WebSocket, WebSocket+TLS), Keycloak and
    # the console (both 8443)
    assert open_ports == [1883, 5671, 5672, 8083, 8084, 8443, 8443, 8883]


def test_keycloak_realm_holds_the_model_users_and_their_groups() -> None:
    capture = capture_of("local")
    realm = json.loads(
        _one(capture, "Secret", "local-keycloak-realm")["stringData"]["enmesh-realm.json"]
    )
    users = {u["username"]: u for u in realm["users"]}
    # and enmesh-auth's service account (remembered logins)
    assert set(users) == {
        "app@acme",
        "backend@iot",
        "device@iot",
        "service-account-enmesh-auth-lookup",
    }
    device = users["device@iot"]
    assert "/iot/send_telemetry" in device["groups"]
    assert "/iot/manage" not in device["groups"]
    passwords = {u: d["credentials"][0]["value"] for u, d in users.items() if "@" in u}
    device_secret = _one(capture, "Secret", "iot-device")["stringData"]["password"]
    assert passwords["device@iot"] == device_secret  # the user's Secret, as Keycloak has it
    assert capture.outputs["keycloakUrl"].endswith("/realms/enmesh")


def test_outputs_name_endpoints_ca_and_keycloak(stack: str) -> None:
    outputs = capture_of(stack).outputs
    assert outputs["caCertificate"].startswith("-----BEGIN CERTIFICATE-----")
    assert outputs["namespace"] == "enmesh"
    assert outputs["keycloakAdminSecret"] == f"{stack}-keycloak-credentials"


# --- bad stack config -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stack", "overrides", "message"),
    [
        ("aws", {"region": None}, "enmesh:region: required on aws stacks"),
        ("local", {"routerMinReplicas": 0}, "enmesh:routerMinReplicas: Input should be greater"),
        ("local", {"region": "eu-west-1"}, "enmesh:region: only for cloud stacks"),
        (
            "local",
            {"brokerStorageSize": "ten gigs"},
            "enmesh:brokerStorageSize: String should match",
        ),
        ("local", {"provider": "digitalocean"}, "enmesh:provider: Input should be 'local'"),
        ("gcp", {"gcpProject": None}, "enmesh:gcpProject: required on gcp stacks"),
        ("local", {"routerEngin": "enmesh"}, "enmesh:routerEngin: Extra inputs are not permitted"),
    ],
)
def test_bad_stack_config_fails_before_any_resource_naming_the_key(
    stack: str, overrides: dict[str, object], message: str
) -> None:
    capture = Capture()
    with pytest.raises(pulumi.RunError) as error:
        run_program(ROOT, stack, config_with(stack, **overrides), capture=capture)
    assert message in str(error.value)
    assert f"stacks/Pulumi.{stack}.yaml" in str(error.value)
    assert capture.resources == []


def test_a_model_that_does_not_validate_stops_the_program(tmp_path: Path) -> None:
    bad = tmp_path / "bad.model.yml"
    bad.write_text("apiVersion: enmesh.io/v1\nkind: Address\nmetadata: {name: x}\nspec: {}\n")
    capture = Capture()
    with pytest.raises(pulumi.RunError, match=r"bad\.model\.yml"):
        run_program(
            ROOT,
            "local",
            {"enmesh:provider": "local", "enmesh:models": [str(bad)]},
            capture=capture,
        )
    assert capture.resources == []


def test_every_stack_file_is_a_known_stack() -> None:
    files = sorted(p.name for p in (ROOT / "stacks").glob("Pulumi.*.yaml"))
    assert files == sorted(f"Pulumi.{s}.yaml" for s in STACKS)


def test_mqtt_gateway_is_an_amqps_client_of_the_routers_behind_its_own_service(
    stack: str,
) -> None:
    capture = capture_of(stack)
    deployment = _one(capture, "Deployment", f"{stack}-mqtt")
    spec = pod_spec(deployment)
    assert spec is not None
    command = spec["containers"][0]["command"]
    assert command[0] == "enmesh-mqtt-gateway"
    assert f"--router=amqps://{stack}-messaging." in " ".join(command)
    assert _volumes(deployment)["tls"]["secret"]["secretName"] == f"{stack}-mqtt-tls"
    # Wildcard subscriptions: the compiled address index, from a ConfigMap it follows.
    index = _one(capture, "ConfigMap", f"{stack}-mqtt-addresses")
    assert "iot" in json.loads(index["data"]["addresses.json"])
    assert _volumes(deployment)["addresses"]["configMap"]["name"] == f"{stack}-mqtt-addresses"
    assert "--addresses=/etc/enmesh-mqtt-addresses/addresses.json" in command
    service = _one(capture, "Service", f"{stack}-mqtt")
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {
        "mqtt": 1883,
        "mqtts": 8883,
        "ws": 8083,
        "wss": 8084,
    }
    _one(capture, "PodDisruptionBudget", f"{stack}-mqtt")
    policy = _one(capture, "NetworkPolicy", f"{stack}-mqtt-gateway")
    allowed = {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]}
    assert allowed == {1883, 8883, 8083, 8084}


def test_mqtt_ports_come_from_the_stack_config_and_a_device_keeps_its_replica() -> None:
    capture = run_with("local", mqttPort=11883, mqttWsPort=0, mqttWssPort=0)
    assert schema_problems(capture.objects, _config("local").kubernetesVersion) == []
    service = _one(capture, "Service", "local-mqtt")
    assert {p["name"]: (p["port"], p["targetPort"]) for p in service["spec"]["ports"]} == {
        "mqtt": (11883, "mqtt"),  # the Service's port; the pod keeps 1883
        "mqtts": (8883, "mqtts"),
    }
    # Persistent sessions live in one gateway process: a device returns to it.
    assert service["spec"]["sessionAffinity"] == "ClientIP"
    spec = pod_spec(_one(capture, "Deployment", "local-mqtt"))
    assert spec is not None
    listening = [a for a in spec["containers"][0]["command"] if a.startswith("--listen=")]
    assert listening == ["--listen=mqtt:0.0.0.0:1883", "--listen=mqtts:0.0.0.0:8883"]
    policy = _one(capture, "NetworkPolicy", "local-mqtt-gateway")
    allowed = {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]}
    assert allowed == {1883, 8883}


@pytest.mark.parametrize(
    ("ports", "problem"),
    [
        ({"mqttPort": 0, "mqttsPort": 0, "mqttWsPort": 0, "mqttWssPort": 0}, "at least one"),
        ({"mqttPort": 8883}, "share a port"),
    ],
)
def test_mqtt_ports_that_cannot_work_are_refused(ports: dict[str, int], problem: str) -> None:
    with pytest.raises(pulumi.RunError, match=problem):
        run_with("local", **ports)
