"""Time `make up` from nothing (cold) and again (warm), and the stack's resident memory.

Cold: the local stack is torn down and everything it installed on this host is removed
first (/opt/enmesh, /etc/enmesh, /var/lib/enmesh, RabbitMQ's data and config, the
deployer's build/local); Debian packages and the project's .venv stay (they are
`make setup`'s, timed in docs/performance.md). Warm: `make up` again, which must change nothing.
RSS: the sum over every supervised program's process tree (routers, RabbitMQ, epmd).
Targets: warm < 60 s, stack < 1.5 GiB. Writes benchmarks/results/stack_up.json.

    .venv/bin/python benchmarks/stack_up.py [--skip-cold]
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import shutil
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "stack_up.json"
INSTALLED = ["/opt/enmesh", "/etc/enmesh", "/var/lib/enmesh", "/var/lib/rabbitmq/mnesia"]
TARGET_WARM_S = 60
TARGET_RSS_MB = 1536


def make(target: str) -> tuple[float, str]:
    started = time.monotonic()
    result = subprocess.run(["make", target], cwd=ROOT, capture_output=True, text=True, check=False)
    elapsed = time.monotonic() - started
    if result.returncode != 0:
        raise SystemExit(f"make {target} failed:\n{result.stdout[-3000:]}\n{result.stderr[-2000:]}")
    return elapsed, result.stdout


def changes(output: str) -> int:
    return sum(int(n) for n in re.findall(r"\bchanged=(\d+)", output))


def tree_rss_kb(pid: int) -> int:
    children = subprocess.run(
        ["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False
    ).stdout.split()
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        own = int(re.search(r"^VmRSS:\s+(\d+)", status, re.MULTILINE)[1])  # type: ignore[index]
    except (OSError, TypeError):
        own = 0
    return own + sum(tree_rss_kb(int(child)) for child in children)


def stack_rss_mb() -> dict[str, float]:
    status = subprocess.run(
        ["supervisorctl", "status"], capture_output=True, text=True, check=False
    ).stdout
    found = {}
    for line in status.splitlines():
        match = re.match(r"^(enmesh-\S+)\s+RUNNING\s+pid (\d+)", line)
        if match:
            found[match[1]] = round(tree_rss_kb(int(match[2])) / 1024, 1)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-cold", action="store_true", help="only the warm run and RSS")
    args = parser.parse_args()
    result: dict[str, object] = {"machine": platform.node(), "cpus": __import__("os").cpu_count()}
    if not args.skip_cold:
        make("down")
        for path in [*INSTALLED, str(ROOT / "build" / "local")]:
            shutil.rmtree(path, ignore_errors=True)
        cold, output = make("up")
        result |= {"cold_make_up_s": round(cold, 1), "cold_changes": changes(output)}
        print(f"cold make up: {cold:.1f} s ({changes(output)} changes)")
    warm, output = make("up")
    rss = stack_rss_mb()
    total = round(sum(rss.values()), 1)
    result |= {
        "warm_make_up_s": round(warm, 1),
        "warm_changes": changes(output),
        "stack_rss_mb": total,
        "rss_by_program_mb": rss,
        "targets": {"warm_make_up_s": TARGET_WARM_S, "stack_rss_mb": TARGET_RSS_MB},
        "met": {"warm": warm < TARGET_WARM_S, "rss": total < TARGET_RSS_MB},
    }
    print(f"warm make up: {warm:.1f} s ({changes(output)} changes; target < {TARGET_WARM_S} s)")
    print(f"stack RSS: {total} MB (target < {TARGET_RSS_MB} MB): {rss}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
