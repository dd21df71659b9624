"""Prometheus for a stack: its scrape configuration, recording and alerting rules.

Every router's metrics listener and every broker's rabbitmq_prometheus port are scraped
(brokers twice: /metrics for the node, /metrics/detailed for per-queue depth, which
needs no per-object setting on the broker). Rules are written in terms of the stack
(its router count, its dead-letter queues, the thresholds of `spec.monitoring.alerts`),
so `promtool check rules` and a real Prometheus read them as they are. JSON is YAML:
the files are JSON, deterministic like every artefact.
"""

from __future__ import annotations

from typing import Any

from enmesh.compile.broker_nodes import broker_nodes
from enmesh.compile.layout import Layout, standard_broker_name
from enmesh.model import AddressType

CONFIG_FILE = "monitoring/prometheus.yml"
RULES_FILE = "monitoring/enmesh.rules.yml"
ROUTER_JOB, BROKER_JOB, QUEUE_JOB = "enmesh-router", "rabbitmq", "rabbitmq-queues"

# Recording rules: mesh-wide rates per address, from the routers' per-peer counters.
# A message a client sends is counted once, at the router it entered (peer="client").
_FLOWS = {
    "enmesh:address_ingress:rate1m": 'direction="in",peer="client"',
    "enmesh:address_egress:rate1m": 'direction="out",peer="client"',
    "enmesh:address_transit:rate1m": 'direction="out",peer="router"',
    "enmesh:address_to_broker:rate1m": 'direction="out",peer="broker"',
    "enmesh:address_from_broker:rate1m": 'direction="in",peer="broker"',
}


def enabled(layout: Layout) -> bool:
    return layout.stack.spec.monitoring.prometheus.enabled


def listen_host(layout: Layout) -> str:
    prometheus = layout.stack.spec.monitoring.prometheus
    return prometheus.host or layout.routers[0].host


def prometheus_config(layout: Layout) -> dict[str, Any]:
    settings = layout.stack.spec.monitoring.prometheus
    brokers = layout.stack.spec.brokers
    broker_targets = [
        {
            "targets": [f"{node.host}:{b.prometheusPort}" for node in broker_nodes(b)],
            "labels": {"broker": b.name},
        }
        for b in brokers
    ]
    return {
        "global": {
            "scrape_interval": settings.scrapeInterval,
            "evaluation_interval": settings.scrapeInterval,
            "external_labels": {"stack": layout.stack.name},
        },
        "rule_files": [layout.config_path(RULES_FILE)],
        "scrape_configs": [
            {
                "job_name": ROUTER_JOB,
                "static_configs": [
                    {"targets": [f"{r.host}:{r.metrics_port}"], "labels": {"router": r.id}}
                    for r in layout.routers
                ],
            },
            {"job_name": BROKER_JOB, "static_configs": broker_targets},
            {
                "job_name": QUEUE_JOB,
                "metrics_path": "/metrics/detailed",
                "params": {"family": ["queue_coarse_metrics"]},
                "static_configs": broker_targets,
            },
        ],
    }


def dead_letter_queues(layout: Layout) -> list[str]:
    return sorted(
        standard_broker_name(tenant.name, address.spec.address)
        for tenant in layout.model.tenants
        for address in tenant.addresses
        if address.spec.type is AddressType.DEADLETTER
    )


def rules(layout: Layout) -> dict[str, Any]:
    alerts = layout.stack.spec.monitoring.alerts
    recording = [
        {
            "record": name,
            "expr": f"sum by (address) (rate(enmesh_address_deliveries_total{{{match}}}[1m]))",
        }
        for name, match in _FLOWS.items()
    ]
    recording += [
        {
            "record": "enmesh:router_ingress:rate1m",
            "expr": "sum by (router) (rate(enmesh_router_deliveries_ingress_total[1m]))",
        },
        {
            "record": "enmesh:queue_messages",
            "expr": "sum by (vhost, queue) (rabbitmq_detailed_queue_messages)",
        },
    ]
    dlqs = "|".join(dead_letter_queues(layout)) or "$^"  # no DLQ: matches nothing
    alerting = [
        _alert(
            "EnmeshRouterDown",
            f'up{{job="{ROUTER_JOB}"}} == 0',
            alerts.routerDownFor,
            "critical",
            "Router {{ $labels.router }} ({{ $labels.instance }}) is not answering scrapes.",
        ),
        # Against the routers answering scrapes, not the compiled count: on Kubernetes the
        # autoscaler runs fewer than the compiled routers, and a router that is down is
        # EnmeshRouterDown's to report.
        _alert(
            "EnmeshMeshPartitioned",
            f'enmesh_router_reachable_routers < scalar(count(up{{job="{ROUTER_JOB}"}} == 1)) - 1',
            "1m",
            "critical",
            "Router {{ $labels.router }} reaches {{ $value }} other routers, fewer than "
            "the routers answering scrapes: the mesh is partitioned.",
        ),
        _alert(
            "EnmeshBrokerDown",
            f'up{{job="{BROKER_JOB}"}} == 0',
            alerts.routerDownFor,
            "critical",
            "Broker {{ $labels.broker }} ({{ $labels.instance }}) is not answering scrapes.",
        ),
        _alert(
            "EnmeshQueueDepthHigh",
            f"enmesh:queue_messages > {alerts.queueDepth}",
            "5m",
            "warning",
            "Queue {{ $labels.queue }} holds {{ $value }} messages "
            f"(threshold {alerts.queueDepth}): are its consumers there?",
        ),
        _alert(
            "EnmeshDeadLetterGrowing",
            f'delta(enmesh:queue_messages{{queue=~"{dlqs}"}}[{alerts.deadLetterWindow}]) > 0',
            "0m",
            "warning",
            "Dead-letter queue {{ $labels.queue }} grew by {{ $value }} in "
            f"{alerts.deadLetterWindow}: messages are failing.",
        ),
    ]
    return {
        "groups": [
            {"name": "enmesh-recording", "rules": recording},
            {"name": "enmesh-alerts", "rules": alerting},
        ]
    }


def _alert(name: str, expr: str, wait: str, severity: str, summary: str) -> dict[str, Any]:
    return {
        "alert": name,
        "expr": expr,
        "for": wait,
        "labels": {"severity": severity},
        "annotations": {"summary": summary},
    }


def deployment(layout: Layout) -> dict[str, Any] | None:
    """deploy.json's `monitoring`: where the stack's Prometheus runs (None: it does not)."""
    if not enabled(layout):
        return None
    settings = layout.stack.spec.monitoring.prometheus
    return {
        "host": listen_host(layout),
        "port": settings.port,
        "config": CONFIG_FILE,
        "rules": RULES_FILE,
        "retention": settings.retention,
    }
