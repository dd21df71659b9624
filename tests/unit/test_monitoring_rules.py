"""The compiled alerting rules under `promtool test rules`: series in, alerts out.

The mesh-partition alert compares each router's reachable peers with the routers that
answer scrapes: on Kubernetes the autoscaler runs fewer routers than the compiled count,
which is no partition; a router that is down is EnmeshRouterDown's, not a partition.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from enmesh.compile import compile_stack_file, monitoring

ROOT = Path(__file__).resolve().parents[2]
PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian's prometheus) absent")
PARTITIONED = "EnmeshMeshPartitioned"


def _series(up: dict[str, int], reachable: dict[str, int]) -> list[dict[str, str]]:
    """Ten minutes of constant samples per router (`up` and its reachable peers)."""
    series = []
    for router, value in up.items():
        labels = f'job="{monitoring.ROUTER_JOB}",router="{router}",instance="{router}:9090"'
        series.append({"series": f"up{{{labels}}}", "values": f"{value}x10"})
        if router in reachable:
            series.append(
                {
                    "series": f"enmesh_router_reachable_routers{{{labels}}}",
                    "values": f"{reachable[router]}x10",
                }
            )
    return series


def _partition_alert(router: str, reachable: int) -> dict[str, Any]:
    return {
        "exp_labels": {
            "severity": "critical",
            "job": monitoring.ROUTER_JOB,
            "router": router,
            "instance": f"{router}:9090",
        },
        "exp_annotations": {
            "summary": f"Router {router} reaches {reachable} other routers, fewer than the "
            "routers answering scrapes: the mesh is partitioned."
        },
    }


def _promtool_test(tmp_path: Path, series: list[dict[str, str]], alerts: list[Any]) -> str:
    _, artefacts = compile_stack_file(ROOT / "stacks" / "local.stack.yml")
    (tmp_path / "rules.yml").write_text(artefacts.files[monitoring.RULES_FILE])
    test = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [
                    {"eval_time": "5m", "alertname": name, "exp_alerts": expected}
                    for name, expected in alerts
                ],
            }
        ],
    }
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test))
    assert PROMTOOL is not None
    result = subprocess.run(
        [PROMTOOL, "test", "rules", "test.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return result.stdout + result.stderr if result.returncode else ""


def test_fewer_routers_running_than_compiled_is_no_partition(tmp_path: Path) -> None:
    # Two of the three compiled routers run (Kubernetes, autoscaler at its minimum).
    series = _series({"r0": 1, "r1": 1}, {"r0": 1, "r1": 1})
    assert _promtool_test(tmp_path, series, [(PARTITIONED, [])]) == ""


def test_a_router_cut_off_from_the_others_is_a_partition(tmp_path: Path) -> None:
    series = _series({"r0": 1, "r1": 1, "r2": 1}, {"r0": 1, "r1": 1, "r2": 0})
    expected = [_partition_alert(r, n) for r, n in (("r0", 1), ("r1", 1), ("r2", 0))]
    assert _promtool_test(tmp_path, series, [(PARTITIONED, expected)]) == ""


def test_a_router_down_is_reported_as_down_not_as_a_partition(tmp_path: Path) -> None:
    series = _series({"r0": 1, "r1": 1, "r2": 0}, {"r0": 1, "r1": 1})
    down = {
        "exp_labels": {
            "severity": "critical",
            "job": monitoring.ROUTER_JOB,
            "router": "r2",
            "instance": "r2:9090",
        },
        "exp_annotations": {"summary": "Router r2 (r2:9090) is not answering scrapes."},
    }
    alerts = [(PARTITIONED, []), ("EnmeshRouterDown", [down])]
    assert _promtool_test(tmp_path, series, alerts) == ""
