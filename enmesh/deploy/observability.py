"""Where a running stack can be watched, and whether it answers: Prometheus, the metrics
ports, the console, the MQTT gateways, the Spark master, worker and job.

`enmesh up` lists them (`describe_lines`); `enmesh status` probes them over HTTP
(`probes`): Prometheus ready and every target it scrapes up, the master ALIVE with a live
worker, the worker answering, the telemetry job RUNNING. Addresses come from deploy.json
(Prometheus, metrics ports) and endpoints.json (console, MQTT gateways and Spark: their roles
record them). A gateway is probed at the MQTT level (enmesh.deploy.mqtt_probe), the console
by its login page over HTTPS with the stack's CA.
"""

from __future__ import annotations

import json
import ssl
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from enmesh.deploy import mqtt_probe, queue_depth

TIMEOUT = 5.0


@dataclass(frozen=True)
class Probe:
    kind: str  # "prometheus", "spark master", ...
    name: str
    where: str
    ok: bool
    detail: str

    def line(self) -> str:
        """A line in the style of `enmesh status`'s router and broker lines."""
        state = "up  " if self.ok else "DOWN"
        return f"  {state}  {self.kind} {self.name:<20} {self.where}  {self.detail}"


def prometheus_url(deployment: Mapping[str, Any]) -> str | None:
    monitoring = deployment.get("monitoring")
    return f"http://{monitoring['host']}:{monitoring['port']}" if monitoring else None


def describe_lines(deployment: Mapping[str, Any], endpoints: Mapping[str, Any]) -> list[str]:
    """The monitoring (and Spark) part of the endpoints block `enmesh up` prints."""
    url = prometheus_url(deployment)
    lines = ["Monitoring:"]
    if url:
        lines.append(f"  {'prometheus':<20} {url}  (targets: {url}/targets, alerts: {url}/alerts)")
    else:
        lines.append(f"  {'prometheus':<20} disabled (spec.monitoring.prometheus.enabled)")
    for router in deployment["routers"]:
        metrics = f"http://{router['host']}:{router['ports']['metrics']}/metrics"
        lines.append(f"  {router['id']:<20} {metrics}")
    for broker in deployment["brokers"]:
        for host in queue_depth.node_hosts(broker):
            metrics = f"http://{host}:{broker['ports']['prometheus']}/metrics"
            lines.append(f"  {broker['name']:<20} {metrics}  (per queue: /metrics/detailed)")
    if endpoints.get("console") and deployment.get("console"):
        lines += [
            "",
            "Console (log in as <user>@<space> with `manage`, or as "
            f"{deployment['console']['administrator']}; HTTPS with the CA above):",
            f"  {endpoints['console']}",
        ]
    for gateway in endpoints.get("mqtt") or []:
        lines += [
            "",
            f"MQTT gateway on {gateway['host']} (user name <user>@<space>, the user's password;"
            " mqtts/wss with the CA above):",
            *(f"  {url}" for url in gateway["urls"]),
        ]
    for spark in endpoints.get("spark") or []:
        job = f"; job {spark['job']}" if spark.get("job") else ""
        lines += [
            "",
            "Telemetry pipeline (Spark):",
            f"  master {spark['master']} (UI {spark['masterUi']}); worker UI "
            f"{spark['workerUi']}{job}",
        ]
    return lines


def _get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=TIMEOUT) as response:
        return int(response.status), bytes(response.read())


def _json(url: str) -> Any:
    return json.loads(_get(url)[1])


def prometheus(url: str) -> Probe:
    """Ready, and every active target healthy (`/api/v1/targets`: health and last error)."""
    try:
        status, _ = _get(f"{url}/-/ready")
        targets = _json(f"{url}/api/v1/targets?state=active")["data"]["activeTargets"]
    except (OSError, ValueError, KeyError) as error:
        return Probe("prometheus", "", url, False, f"not ready: {error}")
    down = [
        f"{t['labels'].get('job')} {t['labels'].get('instance')} "
        f"({t.get('health')}{': ' + t['lastError'] if t.get('lastError') else ''})"
        for t in targets
        if t.get("health") != "up"
    ]
    detail = f"ready; {len(targets) - len(down)}/{len(targets)} targets up"
    if down:
        detail += "; not up: " + ", ".join(sorted(down))
    return Probe("prometheus", "", url, status == 200 and bool(targets) and not down, detail)


def spark(endpoints: Mapping[str, Any]) -> list[Probe]:
    """The master (ALIVE, a live worker), the worker's UI, and the job RUNNING at the master."""
    try:
        master = _json(f"{endpoints['masterUi']}/json/")
    except (OSError, ValueError) as error:
        probe = Probe("spark", "master", endpoints["master"], False, f"unreachable: {error}")
        return [probe]
    workers = int(master.get("aliveworkers", 0))
    state = str(master.get("status"))
    probes = [
        Probe(
            "spark",
            "master",
            endpoints["master"],
            state == "ALIVE" and workers >= 1,
            f"{state}, {workers} live worker(s)",
        ),
        _worker(endpoints["workerUi"]),
    ]
    job = endpoints.get("job")
    if job:
        apps = [a for a in master.get("activeapps", []) if a.get("name") == job]
        states = sorted({str(a.get("state")) for a in apps}) or ["not submitted"]
        probes.append(
            Probe("spark", "job", str(job), "RUNNING" in states, f"application {', '.join(states)}")
        )
    return probes


def _worker(ui: str) -> Probe:
    try:
        worker = _json(f"{ui}/json/")
    except (OSError, ValueError) as error:
        return Probe("spark", "worker", ui, False, f"unreachable: {error}")
    return Probe(
        "spark",
        "worker",
        ui,
        True,
        f"{worker.get('coresused', '?')}/{worker.get('cores', '?')} cores in use",
    )


def console(url: str, ca: Path | None) -> Probe:
    """The login page over HTTPS, its certificate checked against the stack's CA."""
    context = ssl.create_default_context(cafile=str(ca) if ca else None)
    try:
        with urllib.request.urlopen(f"{url}login", timeout=TIMEOUT, context=context) as answer:
            status = int(answer.status)
    except (OSError, ValueError) as error:
        return Probe("console", "", url, False, f"not answering: {error}")
    return Probe("console", "", url, status == 200, f"login page HTTP {status}")


def mqtt_gateway(gateway: Mapping[str, Any], ca: Path | None) -> list[Probe]:
    """Each listener of one host's gateway, at the MQTT level."""
    found = []
    for url in gateway["urls"]:
        ok, detail = mqtt_probe.probe(url, ca)
        found.append(Probe("mqtt gateway", str(gateway["host"]), url, ok, detail))
    return found


def probes(deployment: Mapping[str, Any], endpoints: Mapping[str, Any]) -> list[Probe]:
    found = []
    url = prometheus_url(deployment)
    if url:
        found.append(prometheus(url))
    ca = endpoints.get("ca") or deployment.get("ca")  # status runs on the deployer
    if endpoints.get("console"):
        found.append(console(str(endpoints["console"]), Path(ca) if ca else None))
    for gateway in endpoints.get("mqtt") or []:
        found += mqtt_gateway(gateway, Path(ca) if ca else None)
    for entry in endpoints.get("spark") or []:
        found += spark(entry)
    return found
