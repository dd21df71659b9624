"""`enmesh status`'s Prometheus probe against Debian's real prometheus scraping a real HTTP
target and a closed port; the endpoints block's monitoring lines from a compiled deploy.json."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from enmesh.deploy import observability
from tests.support.mesh import wait_until
from tests.support.ports import free_port, port_is_listening

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS = shutil.which("prometheus")


class _Metrics(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"# TYPE probe_test gauge\nprobe_test 1\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def _serve(port: int) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", port), _Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def targets() -> Iterator[tuple[int, int]]:
    """(a port serving /metrics, a free port nothing listens on yet)."""
    server = _serve(free_port())
    try:
        yield server.server_address[1], free_port()
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.skipif(PROMETHEUS is None, reason="Debian's prometheus is not installed")
def test_the_probe_names_the_target_that_is_down(tmp_path: Path, targets: tuple[int, int]) -> None:
    up_port, down_port = targets
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {"job_name": "up-job", "static_configs": [{"targets": [f"127.0.0.1:{up_port}"]}]},
            {
                "job_name": "down-job",
                "static_configs": [{"targets": [f"127.0.0.1:{down_port}"]}],
            },
        ],
    }
    (tmp_path / "prometheus.yml").write_text(json.dumps(config))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    not_started = observability.prometheus(url)
    assert not not_started.ok and "not ready" in not_started.detail
    log = (tmp_path / "prometheus.log").open("ab")
    process = subprocess.Popen(
        [
            str(PROMETHEUS),
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    late: ThreadingHTTPServer | None = None
    try:
        wait_until(lambda: port_is_listening(port), 30, "prometheus to listen")
        # Both targets scraped once: one up, the other refused.
        wait_until(
            lambda: (
                "1/2 targets up; not up: down-job" in observability.prometheus(url).detail
                and "(unknown)" not in observability.prometheus(url).detail
            ),
            30,
            "a scrape of each target",
            interval=0.2,
        )
        probe = observability.prometheus(url)
        assert not probe.ok
        assert f"not up: down-job 127.0.0.1:{down_port} (down: " in probe.detail
        assert probe.line().startswith("  DOWN  prometheus")
        late = _serve(down_port)  # the missing target comes up
        wait_until(lambda: observability.prometheus(url).ok, 30, "both targets up", interval=0.2)
        assert observability.prometheus(url).detail == "ready; 2/2 targets up"
    finally:
        if late is not None:
            late.shutdown()
            late.server_close()
        process.terminate()
        process.wait(30)
        log.close()


def test_the_endpoints_block_lists_prometheus_every_metrics_port_and_spark() -> None:
    deployment = json.loads((ROOT / "tests/golden/local/deploy.json").read_text())
    spark = {
        "master": "spark://127.0.0.1:7077",
        "masterUi": "http://127.0.0.1:8180",
        "workerUi": "http://127.0.0.1:8181",
        "job": "enmesh-telemetry",
    }
    text = "\n".join(observability.describe_lines(deployment, {"spark": [spark]}))
    assert "prometheus           http://127.0.0.1:9190  " in text
    for router in deployment["routers"]:
        assert f"{router['id']:<20} http://127.0.0.1:{router['ports']['metrics']}/metrics" in text
    assert "broker-0             http://127.0.0.1:15692/metrics" in text
    assert "master spark://127.0.0.1:7077 (UI http://127.0.0.1:8180)" in text
    assert "job enmesh-telemetry" in text
    disabled = observability.describe_lines({**deployment, "monitoring": None}, {})
    assert any("disabled" in line for line in disabled)
    assert observability.probes({**deployment, "monitoring": None}, {}) == []
