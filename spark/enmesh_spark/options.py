"""Command-line options of `enmesh simulate` and `enmesh report`, kept free of heavy imports
so that building the `enmesh` parser does not load matplotlib or pyarrow."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

N = TypeVar("N", int, float)


def positive(kind: Callable[[str], N]) -> Callable[[str], N]:
    """An argparse type: a number of `kind` above 0."""

    def parse(text: str) -> N:
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
        return value

    return parse


def fraction(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text}")
    return value


def simulate_arguments(parser: argparse.ArgumentParser) -> None:
    """`enmesh simulate`'s own options (its connection options are `enmesh send`'s)."""
    parser.add_argument("--devices", type=positive(int), default=10, help="default 10")
    parser.add_argument(
        "--rate", type=positive(float), default=1.0, help="readings per second per device"
    )
    parser.add_argument("--duration", type=positive(float), default=60.0, help="seconds")
    parser.add_argument("--seed", type=int, default=1, help="same seed, same readings")
    parser.add_argument(
        "--malformed", type=fraction, default=0.0, metavar="FRACTION",
        help="share of records sent malformed (the job quarantines them)",
    )  # fmt: skip
    parser.add_argument(
        "--spikes", type=fraction, default=0.001, metavar="FRACTION",
        help="share of readings 40 degrees off (the job flags them as anomalies)",
    )  # fmt: skip
    parser.add_argument(
        "--start-ms", type=int, metavar="EPOCH_MS",
        help="timestamp of the first reading (default: now); fixed with --seed, the same run",
    )  # fmt: skip
    parser.add_argument(
        "--progress", type=float, default=5.0, metavar="SECONDS",
        help="print sent/accepted/rate to stderr this often (default 5; 0: never)",
    )  # fmt: skip
    parser.add_argument(
        "--no-pace", action="store_true",
        help="send as fast as the mesh takes them (timestamps still step at the rate)",
    )  # fmt: skip


def report_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data", type=Path, metavar="DIR",
        help="the telemetry job's output directory (Parquet), to read",
    )  # fmt: skip
    parser.add_argument(
        "--out", "--dest", type=Path, metavar="DIR", dest="out",
        help="report directory, to write (default: DATA/report). --dest is its old name",
    )  # fmt: skip
    parser.add_argument(
        "--device", action="append", metavar="NAME", help="report this device (repeatable)"
    )
    parser.add_argument("--max-devices", type=positive(int), default=20, metavar="N")


def report_directories(args: argparse.Namespace) -> tuple[Path, Path, str | None]:
    """(data, report dir, a note for the user) from `enmesh report`'s options.

    Before `--data` existed, `--out` named the job's output (the input here) and `--dest`
    the report: `--out` alone keeps that old meaning, with a note saying the new one.
    """
    if args.data is not None:
        return args.data, args.out or args.data / "report", None
    if args.out is None:
        raise argparse.ArgumentTypeError("needs --data DIR (the telemetry job's output)")
    note = (
        f"note: reading {args.out} as the job's output (--out alone, its old meaning); "
        f"say --data {args.out} (and --out DIR for the report) from now on"
    )
    return args.out, args.out / "report", note
