"""Debian's real Prometheus for tests, run with a stack's compiled configuration."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

from enmesh.compile import monitoring
from tests.support.mesh import Mesh, wait_until
from tests.support.ports import free_port, port_is_listening

PROMETHEUS = shutil.which("prometheus")


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


@contextmanager
def run_prometheus(mesh: Mesh) -> Iterator[str]:
    """Prometheus on a free port with the compiled files; scrapes and evaluates every second
    (the stack's 15 s would make tests slow, and is not what they check). Yields its URL."""
    assert PROMETHEUS is not None, "Debian's prometheus is not installed (make setup)"
    config = json.loads((mesh.directory / "config" / monitoring.CONFIG_FILE).read_text())
    config["global"] |= {"scrape_interval": "1s", "evaluation_interval": "1s"}
    path = mesh.directory / "prometheus.yml"
    path.write_text(json.dumps(config))
    port = free_port()
    log = (mesh.directory / "prometheus.log").open("ab")
    process = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={path}",
            f"--storage.tsdb.path={mesh.directory / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        # Listening is not ready: its API answers 503 until the storage is open.
        wait_until(lambda: port_is_listening(port) and _ready(url), 30, "prometheus to be ready")
        yield url
    finally:
        process.terminate()
        process.wait(30)
        log.close()
