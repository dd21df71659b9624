"""Compile a generated model of 10,000 addresses in 100 address spaces.

Prints and records wall time (load + validate, compile) and peak RSS of a fresh
process to benchmarks/results/compile_scale.json. Targets: < 2 s total, < 300 MB.

    .venv/bin/python benchmarks/compile_scale.py [--spaces N] [--addresses-per-space M]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "compile_scale.json"
TYPES = ("anycast", "multicast", "queue", "topic", "subscription", "deadletter")
TARGET_SECONDS = 2.0
TARGET_MB = 300


def generate(directory: Path, spaces: int, per_space: int) -> Path:
    docs = [
        f"apiVersion: enmesh.io/v1\nkind: AddressPlan\nmetadata: {{name: p-{t}}}\n"
        f"spec: {{addressType: {t}}}\n"
        for t in TYPES
    ]
    docs.append(
        "apiVersion: enmesh.io/v1\nkind: AddressSpacePlan\nmetadata: {name: big}\nspec:\n"
        "  addressSpaceType: standard\n"
        f"  resourceLimits: {{connections: 1000, addresses: {per_space}, brokers: 3}}\n"
        f"  addressPlans: [{', '.join(f'p-{t}' for t in TYPES)}]\n"
    )
    for s in range(spaces):
        space = f"tenant-{s:03d}"
        docs.append(
            f"apiVersion: enmesh.io/v1\nkind: AddressSpace\nmetadata: {{name: {space}}}\n"
            "spec: {type: standard, plan: big}\n"
        )
        docs.append(
            f"apiVersion: enmesh.io/v1\nkind: Address\nmetadata: {{name: {space}.dlq}}\n"
            f"spec: {{addressSpace: {space}, address: dlq, type: deadletter, plan: p-deadletter}}\n"
        )
        docs.append(
            f"apiVersion: enmesh.io/v1\nkind: Address\nmetadata: {{name: {space}.topic}}\n"
            f"spec: {{addressSpace: {space}, address: topic, type: topic, plan: p-topic}}\n"
        )
        for a in range(per_space - 2):
            kind = TYPES[a % 3]  # anycast, multicast, queue
            extra = ", ttlSeconds: 60, maxDeliveries: 5, deadLetterAddress: dlq" * (kind == "queue")
            if a % 10 == 9:
                kind, extra = "subscription", ", topic: topic"
            docs.append(
                f"apiVersion: enmesh.io/v1\nkind: Address\nmetadata: {{name: {space}.a{a}}}\n"
                f"spec: {{addressSpace: {space}, address: a{a}, type: {kind}, "
                f"plan: p-{kind}{extra}}}\n"
            )
        docs.append(
            f"apiVersion: enmesh.io/v1\nkind: MessagingUser\nmetadata: {{name: {space}.app}}\n"
            f"spec:\n  addressSpace: {space}\n  username: app\n"
            f"  authentication: {{passwordSecret: {{name: {space}-app, key: password}}}}\n"
            "  authorization: [{operations: [send, recv], addresses: ['*']}]\n"
        )
    model = directory / "scale.model.yml"
    model.write_text("---\n".join(docs), encoding="utf-8")
    (directory / "scale.stack.yml").write_text(
        "apiVersion: enmesh.io/v1\nkind: Stack\nmetadata: {name: scale}\nspec:\n"
        "  models: [scale.model.yml]\n  routers: {count: 3}\n"
        "  brokers: [{name: b0}, {name: b1}, {name: b2}]\n",
        encoding="utf-8",
    )
    return directory / "scale.stack.yml"


def measure(stack_file: Path) -> dict[str, float]:
    """Runs in a fresh interpreter so that peak RSS belongs to this work alone."""
    from enmesh.compile import compile_model, load_stack  # noqa: PLC0415
    from enmesh.model import load_model  # noqa: PLC0415

    start = time.perf_counter()
    stack, models = load_stack(stack_file)
    model = load_model(models)
    loaded = time.perf_counter()
    artefacts = compile_model(stack, model)
    compiled = time.perf_counter()
    return {
        "load_validate_s": round(loaded - start, 3),
        "compile_s": round(compiled - loaded, 3),
        "total_s": round(compiled - start, 3),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "artefact_bytes": sum(len(t) for t in artefacts.files.values()),
        "addresses": sum(len(t.addresses) for t in model.tenants),
        "spaces": len(model.tenants),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spaces", type=int, default=100)
    parser.add_argument("--addresses-per-space", type=int, default=100)
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        stack_file = generate(Path(tmp), args.spaces, args.addresses_per_space)
        size_mb = (Path(tmp) / "scale.model.yml").stat().st_size / 1e6
        print(
            f"generated {args.spaces} spaces x {args.addresses_per_space} addresses "
            f"({size_mb:.1f} MB of YAML); compiling in a fresh process..."
        )
        output = subprocess.run(
            [sys.executable, __file__, "--measure", str(stack_file)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    figures = json.loads(output)
    figures |= {
        "target_total_s": TARGET_SECONDS,
        "target_peak_rss_mb": TARGET_MB,
        "meets_targets": figures["total_s"] < TARGET_SECONDS and figures["peak_rss_mb"] < TARGET_MB,
        "python": platform.python_version(),
        "cpus": len(os.sched_getaffinity(0)),
    }
    for key, value in figures.items():
        print(f"  {key:20} {value}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"written to {RESULTS}")


if __name__ == "__main__":
    main()
