"""Large messages through a 3-router chain: memory with a stalled receiver, 1 MB throughput.

    .venv/bin/python benchmarks/router_large.py [--stalled-mb 50] [--messages 100]
        [--session-frames N] [--label X]

(a) A consumer on router 2 that takes no bytes (64 KB session window, never freed) and a
    producer on router 0 sending one `--stalled-mb` message: each router's RSS growth and
    its stream gauge once the producer can hand over no more (or has handed over all).
(b) `--messages` 1 MB messages, unsettled, from router 0 to a consumer on router 2 (credit
    10): messages/s and MB/s from the first send to the last outcome.
Prints the figures and writes benchmarks/results/router_large[-LABEL].json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from proton import Message

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.router.conftest import ConsumerFirst  # noqa: E402
from tests.router.test_streaming import MB, StalledReceiver, bound_session_windows  # noqa: E402
from tests.support.amqp import run  # noqa: E402
from tests.support.mesh import build_mesh  # noqa: E402


class Throughput(ConsumerFirst):
    """`total` messages of `size` bytes, router 0 -> router 2, unsettled."""

    def __init__(self, mesh: Any, total: int, size: int) -> None:
        super().__init__(mesh, prefetch=10)
        self.total, self.payload = total, Message(body=b"x" * size).encode()
        self.sent = self.settled = 0
        self.started = self.finished = 0.0

    def on_sendable(self, event: Any) -> None:
        if not self.started:
            self.started = time.perf_counter()
        while event.sender.credit and self.sent < self.total:
            event.sender.delivery(str(self.sent))
            event.sender.stream(self.payload)
            event.sender.advance()
            self.sent += 1

    def on_settled(self, event: Any) -> None:
        if event.link.is_sender:
            self.settled += 1
            if self.settled == self.total:
                self.finished = time.perf_counter()
                self.done()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stalled-mb", type=int, default=50)
    parser.add_argument("--messages", type=int, default=100)
    parser.add_argument("--label", default="")
    parser.add_argument(
        "--session-frames", type=int, default=0, help="maxSessionFrames everywhere (0: unbounded)"
    )
    parser.add_argument("--messages-only", action="store_true")
    parser.add_argument("--stalled-only", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        mesh = build_mesh(Path(tmp) / "chain", routers=3, topology="chain")
        if args.session_frames:
            bound_session_windows(mesh, args.session_frames)
        mesh.start()
        try:
            mesh.wait_converged()
            seconds, stalled = 0.0, None
            if not args.stalled_only:
                flow = run(Throughput(mesh, args.messages, MB), timeout=600)
                seconds = flow.finished - flow.started
                print(f"1 MB messages: {args.messages / seconds:.1f}/s", flush=True)
            if not args.messages_only:
                stalled = run(StalledReceiver(mesh, args.stalled_mb * MB), timeout=600)
        finally:
            mesh.stop()
    result: dict[str, Any] = {"label": args.label, "max_session_frames": args.session_frames}
    if seconds:
        result["throughput_1mb"] = {
            "messages": args.messages,
            "seconds": round(seconds, 3),
            "messages_per_s": round(args.messages / seconds, 1),
        }
    if stalled is not None:
        result["stalled_receiver"] = {
            "message_mb": args.stalled_mb,
            "left_with_producer_mb": round(stalled.sending.pending / MB, 1),
            "rss_growth_mb_per_router": [round(kb / 1024, 1) for kb in stalled.rss_growth_kb],
            "stream_buffered_bytes": stalled.buffered,
        }
    print(json.dumps(result, indent=2))
    suffix = f"-{args.label}" if args.label else ""
    out = ROOT / "benchmarks" / "results" / f"router_large{suffix}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
