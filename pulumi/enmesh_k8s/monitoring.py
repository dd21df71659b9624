"""`Monitoring`: the stack for a cluster's Prometheus operator (`enmesh:prometheusOperator`).

A PodMonitor for the routers, a ServiceMonitor for RabbitMQ and a PrometheusRule with the
compiled recording and alerting rules (enmesh.k8s.monitors). The metrics ports admit only
namespaces labelled `enmesh.io/monitoring: "true"` (network.py): label Prometheus's.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from enmesh.k8s import monitors
from enmesh.k8s.config import KubeStackConfig
from enmesh.k8s.layout import KubeLayout
from enmesh.k8s.monitoring_schema import API_VERSION
from enmesh_k8s import workload as w


class Monitoring(pulumi.ComponentResource):
    def __init__(
        self,
        name: str,
        *,
        layout: KubeLayout,
        config: KubeStackConfig,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("enmesh:k8s:Monitoring", name, None, opts)
        self._names = layout.names
        self._labels = w.labels(layout.names.stack, "monitoring") | config.monitor_labels
        self._opts = pulumi.ResourceOptions(parent=self)
        stack = layout.names.stack
        self._object(
            "PodMonitor",
            layout.names.router,
            monitors.router_monitor_spec(layout, w.labels(stack, "router")),
        )
        self._object(
            "ServiceMonitor",
            layout.names.broker,
            monitors.broker_monitor_spec(layout, w.labels(stack, "broker")),
        )
        self._object("PrometheusRule", f"{stack}-rules", monitors.rules_spec(layout))
        self.register_outputs({})

    def _object(self, kind: str, object_name: str, spec: dict[str, Any]) -> None:
        k8s.apiextensions.CustomResource(
            f"{object_name}-{kind.lower()}",
            api_version=API_VERSION,
            kind=kind,
            metadata=w.metadata(object_name, self._names.namespace, self._labels),
            spec=spec,
            opts=self._opts,
        )
