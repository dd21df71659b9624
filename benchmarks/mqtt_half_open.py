"""Half-open sockets against the MQTT gateway: connected, never a CONNECT.

    .venv/bin/python benchmarks/mqtt_half_open.py [--sockets N] [--rounds R]

Each round opens N sockets that send nothing, then waits for the gateway to close every
one (its CONNECT timeout, 10 s); then a real CONNECT must still be answered. Gateway RSS
is sampled before, while holding and after each round: no growth from round to round
means nothing is kept per socket (CPython's allocator keeps its high-water mark, so RSS
does not drop back to the first baseline). No router is needed: nothing gets that far.
Figures go to benchmarks/results/mqtt_half_open.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from enmesh.router.main import raise_descriptor_limit  # noqa: E402
from tests.support.mesh import wait_until  # noqa: E402
from tests.support.ports import free_port, port_is_listening  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "mqtt_half_open.json"
CONNECT_311 = b"\x10\x0d\x00\x04MQTT\x04\x02\x00\x1e\x00\x01x"  # no user name


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def one_round(port: int, pid: int, count: int) -> dict[str, int]:
    sockets = [socket.create_connection(("127.0.0.1", port)) for _ in range(count)]
    holding = rss_kb(pid)
    closed, deadline = 0, time.monotonic() + 30
    for sock in sockets:
        sock.settimeout(max(deadline - time.monotonic(), 0.1))
        with contextlib.suppress(OSError):  # a timeout: not closed by the gateway
            closed += sock.recv(1) == b""
        sock.close()
    return {"holding_kb": holding, "closed_by_gateway": closed, "after_kb": rss_kb(pid)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sockets", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    raise_descriptor_limit()
    port = free_port()
    gateway = subprocess.Popen(
        [
            sys.executable, "-m", "enmesh.mqtt", "--router", "amqp://127.0.0.1:9",
            f"--listen=mqtt:127.0.0.1:{port}", "--state-dir", tempfile.mkdtemp(),
            "--log-level", "warning",
        ]
    )  # fmt: skip
    try:
        wait_until(lambda: port_is_listening(port), 20, "the gateway to listen")
        figures: dict[str, object] = {"sockets": args.sockets, "baseline_kb": rss_kb(gateway.pid)}
        rounds = []
        for number in range(args.rounds):
            rounds.append(one_round(port, gateway.pid, args.sockets))
            print(f"round {number + 1}: {rounds[-1]}")
        figures["rounds"] = rounds
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(CONNECT_311)
            answer = sock.recv(16)
        figures["connect_after"] = answer.hex()  # 20020004: CONNACK, bad user name
        figures["growth_first_to_last_round_kb"] = rounds[-1]["after_kb"] - rounds[0]["after_kb"]
        print(f"a CONNECT afterwards gets {answer!r}")
        RESULTS.write_text(json.dumps(figures, indent=2) + "\n")
        print(f"written to {RESULTS.relative_to(ROOT)}")
    finally:
        gateway.terminate()
        gateway.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
