"""tests.support.fake_peer in a process of its own, seen from the test: its event lines,
each with the time it arrived, read with a timeout."""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.support.ports import free_port

ROOT = Path(__file__).resolve().parents[2]


class PeerProcess:
    def __init__(self, *options: str) -> None:
        self.port = free_port()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.fake_peer", str(self.port), *options],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[tuple[float, str]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put((time.monotonic(), line.strip()))

    def expect(self, wanted: str, timeout: float = 30) -> float:
        """Wait for the line `wanted` (earlier lines are skipped); when it came."""
        seen: list[str] = []
        while True:
            try:
                when, line = self.lines.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"the peer never said {wanted!r}; it said {seen}") from None
            seen.append(line)
            if line == wanted:
                return when

    def stop(self) -> None:
        self.process.kill()
        self.process.wait(10)
