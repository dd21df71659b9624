"""The Grafana dashboard shipped in deploy/grafana reads only series the compiled rules record."""

from __future__ import annotations

import json
import re
from pathlib import Path

from enmesh.compile import compile_stack_file, monitoring

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "enmesh.json"


def test_every_panel_queries_a_recorded_series() -> None:
    _, artefacts = compile_stack_file(ROOT / "stacks" / "local.stack.yml")
    rules = json.loads(artefacts.files[monitoring.RULES_FILE])
    recorded = {r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r}
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["panels"]
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            names = set(re.findall(r"[a-z_]+:[a-z0-9_]+:?[a-z0-9_]*", target["expr"]))
            assert names and names <= recorded, (panel["title"], names - recorded)
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            assert set(re.findall(r"enmesh:[a-z0-9_:]+", variable["query"])) <= recorded
