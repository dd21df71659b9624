"""JSON schemas of the Prometheus operator's objects enmesh writes (monitoring.coreos.com/v1).

kubernetes-validate has schemas for built-in kinds only. These are derived, by hand, from
the openAPIV3Schema of the prometheus-operator CRDs (v0.93.0, `example/prometheus-operator-crd/`,
Apache-2.0): the same types, enums, patterns and required fields, for the fields enmesh
sets and no others. Stricter than the CRDs on purpose: an unknown field is an error here,
where the API server would prune it silently (a misspelt `relabelings` would scrape
without the job label the rules match on).
"""

from __future__ import annotations

from typing import Any

API_VERSION = "monitoring.coreos.com/v1"

# The CRDs' duration pattern (Prometheus durations).
_DURATION = {
    "type": "string",
    "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?"
    r"(([0-9]+)ms)?)$",
}
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
_ACTIONS = [
    "replace",
    "Replace",
    "keep",
    "Keep",
    "drop",
    "Drop",
    "hashmod",
    "HashMod",
    "labelmap",
    "LabelMap",
    "labeldrop",
    "LabelDrop",
    "labelkeep",
    "LabelKeep",
    "lowercase",
    "Lowercase",
    "uppercase",
    "Uppercase",
    "keepequal",
    "KeepEqual",
    "dropequal",
    "DropEqual",
]


def _object(required: list[str], **properties: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "required": required,
        "properties": properties,
        "additionalProperties": False,
    }


_RELABELING = _object(
    [],
    action={"type": "string", "enum": _ACTIONS},
    regex={"type": "string"},
    replacement={"type": "string"},
    separator={"type": "string"},
    sourceLabels={"type": "array", "items": {"type": "string"}},
    targetLabel={"type": "string"},
)
_SELECTOR = _object(
    [],
    matchLabels=_STRING_MAP,
    matchExpressions={
        "type": "array",
        "items": _object(
            ["key", "operator"],
            key={"type": "string"},
            operator={"type": "string"},
            values={"type": "array", "items": {"type": "string"}},
        ),
    },
)
_NAMESPACE_SELECTOR = _object(
    [], any={"type": "boolean"}, matchNames={"type": "array", "items": {"type": "string"}}
)
_ENDPOINT = {
    "port": {"type": "string"},
    "path": {"type": "string"},
    "scheme": {"type": "string", "enum": ["http", "https", "HTTP", "HTTPS"]},
    "params": {
        "type": "object",
        "additionalProperties": {"type": "array", "items": {"type": "string"}},
    },
    "interval": _DURATION,
    "scrapeTimeout": _DURATION,
    "honorLabels": {"type": "boolean"},
    "relabelings": {"type": "array", "items": _RELABELING},
}
_METADATA = _object(
    ["name", "namespace"],
    name={"type": "string", "maxLength": 253, "pattern": _DNS_SUBDOMAIN},
    namespace={"type": "string", "maxLength": 63},
    labels=_STRING_MAP,
    annotations=_STRING_MAP,
)
_RULE = _object(
    ["expr"],
    record={"type": "string"},
    alert={"type": "string"},
    expr={"anyOf": [{"type": "integer"}, {"type": "string"}]},
    labels=_STRING_MAP,
    annotations=_STRING_MAP,
    keep_firing_for={**_DURATION, "minLength": 1},
    **{"for": _DURATION},
)


def _kind(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return _object(
        ["apiVersion", "kind", "metadata", "spec"],
        apiVersion={"const": API_VERSION},
        kind={"const": kind},
        metadata=_METADATA,
        spec=spec,
    )


SCHEMAS: dict[str, dict[str, Any]] = {
    "PodMonitor": _kind(
        "PodMonitor",
        _object(
            ["selector"],
            selector=_SELECTOR,
            namespaceSelector=_NAMESPACE_SELECTOR,
            jobLabel={"type": "string"},
            podMetricsEndpoints={"type": "array", "items": _object([], **_ENDPOINT)},
        ),
    ),
    "ServiceMonitor": _kind(
        "ServiceMonitor",
        _object(
            ["endpoints", "selector"],
            selector=_SELECTOR,
            namespaceSelector=_NAMESPACE_SELECTOR,
            jobLabel={"type": "string"},
            endpoints={"type": "array", "items": _object([], **_ENDPOINT)},
        ),
    ),
    "PrometheusRule": _kind(
        "PrometheusRule",
        _object(
            [],
            groups={
                "type": "array",
                "items": _object(
                    ["name"],
                    name={"type": "string", "minLength": 1},
                    interval=_DURATION,
                    labels=_STRING_MAP,
                    rules={"type": "array", "items": _RULE},
                ),
            },
        ),
    ),
}
