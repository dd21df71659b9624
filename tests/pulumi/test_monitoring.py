"""`enmesh:prometheusOperator`: PodMonitor, ServiceMonitor and PrometheusRule under the mocks.

They must validate (monitoring_schema), select the pods and ports the stack runs, scrape
what the compiled prometheus.yml scrapes under the job names the compiled rules match on,
and carry the compiled rules unchanged.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pulumi
import pytest

from enmesh.compile import monitoring
from enmesh.k8s.capture import Capture, run_program
from enmesh.k8s.config import parse_config
from enmesh.k8s.layout import kube_layout
from enmesh.k8s.monitoring_schema import API_VERSION
from enmesh.k8s.schema import pod_spec, schema_problems
from tests.pulumi.conftest import ROOT, capture_of, config_with, run_with

KINDS = ("PodMonitor", "PrometheusRule", "ServiceMonitor")
LABELS = ["release=kube-prometheus-stack", "team.example.com/owner=messaging"]
_with_operator: dict[str, Capture] = {}


def operator_capture(stack: str) -> Capture:
    if stack not in _with_operator:
        _with_operator[stack] = run_with(stack, prometheusOperator=True, monitorLabels=LABELS)
    return _with_operator[stack]


def _monitoring_objects(capture: Capture) -> dict[str, dict[str, Any]]:
    found = [o for o in capture.objects if o.get("apiVersion") == API_VERSION]
    assert sorted(o["kind"] for o in found) == sorted({o["kind"] for o in found})  # one each
    return {o["kind"]: o for o in found}


def _compiled(stack: str, path: str) -> Any:
    config = parse_config(config_with(stack), stack)
    layout = kube_layout(config, stack, ROOT / "stacks")
    return json.loads(layout.artefacts.files[path])


def test_no_operator_objects_unless_the_stack_says_so(stack: str) -> None:
    assert _monitoring_objects(capture_of(stack)) == {}


def test_operator_objects_validate_with_every_other_object(stack: str) -> None:
    capture = operator_capture(stack)
    assert sorted(_monitoring_objects(capture)) == list(KINDS)
    version = parse_config(config_with(stack), stack).kubernetesVersion
    assert schema_problems(capture.objects, version) == []


def test_the_rule_object_is_the_compiled_rules_file(stack: str) -> None:
    rule = _monitoring_objects(operator_capture(stack))["PrometheusRule"]
    assert rule["spec"] == _compiled(stack, monitoring.RULES_FILE)


def test_monitors_select_the_stacks_pods_and_ports(stack: str) -> None:
    capture = operator_capture(stack)
    objects = _monitoring_objects(capture)
    routers = [o for o in capture.kind("StatefulSet") if o["metadata"]["name"].endswith("-router")]
    template = routers[0]["spec"]["template"]
    pod = objects["PodMonitor"]["spec"]
    assert pod["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    spec = pod_spec(routers[0])
    assert spec is not None
    ports = {p["name"] for c in spec["containers"] for p in c.get("ports", [])}
    assert {e["port"] for e in pod["podMetricsEndpoints"]} <= ports

    service = objects["ServiceMonitor"]["spec"]
    matched = [
        s
        for s in capture.kind("Service")
        if service["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()
    ]
    with_port = [s for s in matched if {e["port"] for e in service["endpoints"]} <= _port_names(s)]
    assert [s["metadata"]["name"] for s in with_port] == [f"{stack}-broker"]
    # What the ports lead to: the broker StatefulSet's pods (the ServiceMonitor's targets).
    brokers = [o for o in capture.kind("StatefulSet") if o["metadata"]["name"].endswith("-broker")]
    pod_labels = brokers[0]["spec"]["template"]["metadata"]["labels"]
    assert with_port[0]["spec"]["selector"].items() <= pod_labels.items()


def _port_names(service: dict[str, Any]) -> set[str]:
    return {p["name"] for p in service["spec"]["ports"]}


def _jobs(endpoints: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Scrape endpoint by the job name its relabelings give it."""
    found = {}
    for endpoint in endpoints:
        jobs = [r["replacement"] for r in endpoint["relabelings"] if r["targetLabel"] == "job"]
        assert len(jobs) == 1, endpoint
        found[jobs[0]] = endpoint
    return found


def test_monitors_scrape_the_compiled_jobs_under_the_names_the_rules_use(stack: str) -> None:
    objects = _monitoring_objects(operator_capture(stack))
    endpoints = _jobs(
        objects["PodMonitor"]["spec"]["podMetricsEndpoints"]
        + objects["ServiceMonitor"]["spec"]["endpoints"]
    )
    compiled = _compiled(stack, monitoring.CONFIG_FILE)
    scrape = {job["job_name"]: job for job in compiled["scrape_configs"]}
    assert sorted(endpoints) == sorted(scrape)
    for name, job in scrape.items():
        endpoint = endpoints[name]
        assert endpoint["path"] == job.get("metrics_path", "/metrics"), name
        assert endpoint.get("params") == job.get("params"), name
        assert endpoint["interval"] == compiled["global"]["scrape_interval"], name
        # The labels the local stack's static targets carry (router / broker), per pod.
        (target_label,) = {k for c in job["static_configs"] for k in c.get("labels", {})}
        assert {
            "action": "replace",
            "sourceLabels": ["__meta_kubernetes_pod_name"],
            "targetLabel": target_label,
        } in endpoint["relabelings"], name
    rules = json.dumps(objects["PrometheusRule"]["spec"])
    matched = set(re.findall(r'job=\\"([^"\\]+)\\"', rules))
    assert matched and matched <= set(endpoints)


def test_monitor_labels_reach_every_operator_object() -> None:
    for obj in _monitoring_objects(operator_capture("aws")).values():
        labels = obj["metadata"]["labels"]
        assert labels["release"] == "kube-prometheus-stack"
        assert labels["team.example.com/owner"] == "messaging"
        assert obj["metadata"]["namespace"] == "enmesh"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"monitorLabels": ["release=x"]},
            "enmesh:monitorLabels: only with enmesh:prometheusOperator: true",
        ),
        (
            {"prometheusOperator": True, "monitorLabels": ["release"]},
            "enmesh:monitorLabels.0: String should match pattern",
        ),
        ({"prometheusOperator": "perhaps"}, "enmesh:prometheusOperator: Input should be"),
    ],
)
def test_bad_monitoring_config_names_the_key(overrides: dict[str, object], message: str) -> None:
    capture = Capture()
    with pytest.raises(pulumi.RunError) as error:
        run_program(ROOT, "local", config_with("local", **overrides), capture=capture)
    assert message in str(error.value)
    assert capture.resources == []


def test_the_schema_check_rejects_a_broken_monitor() -> None:
    objects = _monitoring_objects(operator_capture("local"))
    monitor = objects["PodMonitor"]
    endpoint = monitor["spec"]["podMetricsEndpoints"][0]
    misspelt = {**endpoint, "relabellings": endpoint["relabelings"]}
    broken = {**monitor, "spec": {"podMetricsEndpoints": [misspelt]}}
    problems = schema_problems([broken], "1.33")
    assert any("'selector' is a required property" in p for p in problems), problems
    assert any("relabellings" in p and "podMetricsEndpoints/0" in p for p in problems), problems
    rule = objects["PrometheusRule"]
    bad_for = json.loads(json.dumps(rule))
    bad_for["spec"]["groups"][1]["rules"][0]["for"] = "one minute"
    (problem,) = schema_problems([bad_for], "1.33")
    assert problem.startswith("PrometheusRule enmesh/local-rules: spec/groups/1/rules/0/for:")
