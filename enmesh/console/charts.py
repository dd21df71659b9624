"""The last hour of a space's traffic, from the stack's Prometheus (its recording rules,
enmesh/compile/monitoring.py). The console asks Prometheus server-side, for a space it
has checked the user may see; the browser only talks to the console."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from typing import Any

# label -> recorded per-address rate (messages/s, 1 min window), summed over the space
SERIES = {
    "in (from clients)": "enmesh:address_ingress:rate1m",
    "out (to clients)": "enmesh:address_egress:rate1m",
}
WINDOW, STEP = 3600, 60  # the last hour, a point a minute


class PrometheusError(Exception):
    pass


def _query_range(base: str, query: str, start: float, end: float) -> list[Any]:
    return _api(base, "query_range", query=query, start=start, end=end, step=STEP)


def instant(base: str, query: str) -> list[Any]:
    """An instant query's vector: `[{"metric": {...}, "value": [time, "value"]}, ...]`."""
    return _api(base, "query", query=query)


def _api(base: str, path: str, **params: Any) -> list[Any]:
    query = urllib.parse.urlencode(params)
    try:
        with urllib.request.urlopen(f"{base}/api/v1/{path}?{query}", timeout=5) as reply:
            body = json.loads(reply.read())
    except (OSError, ValueError) as exc:
        raise PrometheusError(f"Prometheus at {base}: {exc}") from exc
    if body.get("status") != "success":
        raise PrometheusError(f"Prometheus at {base}: {body.get('error', 'query failed')}")
    result: list[Any] = body["data"]["result"]
    return result


def space_rates(
    base: str, space: str, now: float | None = None, address: str | None = None
) -> dict[str, Any]:
    """Chart.js data: minute labels and one dataset per direction, messages per second, of
    the whole space or of one of its addresses; `empty` when Prometheus has no point."""
    end = int(now if now is not None else time.time())
    start = end - WINDOW
    stamps = list(range(start, end + 1, STEP))
    # `space` is a validated address-space name ([a-z0-9-]), `address` an address of the
    # model ([A-Za-z0-9_.-/]): safe inside PromQL's quotes and regex.
    match = f'address=~"{space}/.*"' if address is None else f'address="{space}/{address}"'
    datasets = []
    for label, record in SERIES.items():
        found = _query_range(base, f"sum({record}{{{match}}})", start, end)
        points = {int(float(t)): float(v) for t, v in (found[0]["values"] if found else [])}
        datasets.append({"label": label, "data": [points.get(s) for s in stamps]})
    labels = [time.strftime("%H:%M", time.gmtime(s)) for s in stamps]
    empty = all(v is None for d in datasets for v in d["data"])
    return {
        "labels": labels,
        "datasets": datasets,
        "unit": "messages/s",
        "time": "UTC",
        "empty": empty,
    }


def address_rates(base: str, space: str) -> dict[str, tuple[float, float]]:
    """Address (without the space) -> messages/s in from and out to clients, now."""
    found: dict[str, list[float]] = {}
    for column, record in enumerate(SERIES.values()):
        for series in _api(
            base, "query", query=f'sum by (address) ({record}{{address=~"{space}/.*"}})'
        ):
            address = str(series["metric"].get("address", "")).removeprefix(f"{space}/")
            found.setdefault(address, [0.0, 0.0])[column] = float(series["value"][1])
    return {address: (v[0], v[1]) for address, v in found.items()}
