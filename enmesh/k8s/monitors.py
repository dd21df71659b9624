"""The Prometheus operator's view of a stack, from the same compiled files as the local one.

`monitoring/prometheus.yml` names the scrape jobs (routers; brokers' /metrics and their
per-queue /metrics/detailed) and `monitoring/enmesh.rules.yml` the recording and alerting
rules. On Kubernetes the jobs become a PodMonitor (routers: no Service exposes their
metrics port, and every pod is a target) and a ServiceMonitor (RabbitMQ's client Service
has a `prometheus` port), with relabelings that give the targets the job names and the
`router`/`broker` labels the rules and the Grafana dashboard match on; the rules file
becomes a PrometheusRule's spec as it is.
"""

from __future__ import annotations

import json
from typing import Any

from enmesh.compile import monitoring
from enmesh.k8s.layout import KubeLayout

POD_NAME = "__meta_kubernetes_pod_name"
# Container / Service port names (enmesh.k8s.layout PORTS and BROKER_PORTS).
ROUTER_PORT, BROKER_PORT = "metrics", "prometheus"


def _jobs(layout: KubeLayout) -> dict[str, dict[str, Any]]:
    config = json.loads(layout.artefacts.files[monitoring.CONFIG_FILE])
    return {job["job_name"]: job for job in config["scrape_configs"]}


def _endpoint(layout: KubeLayout, job: dict[str, Any], port: str, label: str) -> dict[str, Any]:
    endpoint: dict[str, Any] = {
        "port": port,
        "path": job.get("metrics_path", "/metrics"),
        "interval": layout.stack.spec.monitoring.prometheus.scrapeInterval,
        "relabelings": [
            {"action": "replace", "targetLabel": "job", "replacement": job["job_name"]},
            {"action": "replace", "sourceLabels": [POD_NAME], "targetLabel": label},
        ],
    }
    if job.get("params"):
        endpoint["params"] = job["params"]
    return endpoint


def router_monitor_spec(layout: KubeLayout, selector: dict[str, str]) -> dict[str, Any]:
    """PodMonitor spec: every router pod's metrics port, as job `enmesh-router`."""
    job = _jobs(layout)[monitoring.ROUTER_JOB]
    return {
        "selector": {"matchLabels": selector},
        "podMetricsEndpoints": [_endpoint(layout, job, ROUTER_PORT, "router")],
    }


def broker_monitor_spec(layout: KubeLayout, selector: dict[str, str]) -> dict[str, Any]:
    """ServiceMonitor spec: every RabbitMQ node behind the client Service, per broker job.

    The headless node Service carries the same labels but no `prometheus` port, so it
    adds no targets."""
    jobs = _jobs(layout)
    return {
        "selector": {"matchLabels": selector},
        "endpoints": [
            _endpoint(layout, jobs[name], BROKER_PORT, "broker")
            for name in (monitoring.BROKER_JOB, monitoring.QUEUE_JOB)
        ],
    }


def rules_spec(layout: KubeLayout) -> dict[str, Any]:
    """PrometheusRule spec: the compiled rules file, unchanged."""
    return dict(json.loads(layout.artefacts.files[monitoring.RULES_FILE]))
