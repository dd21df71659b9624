"""`enmesh export`: the runtime part of a stack's model (what the console added while the
stack ran, `<paths.state>/runtime/*.model.yml`) as model YAML, printed, or moved into one
of the stack's model files in git so it can be committed.

Moving changes nothing the stack runs: the documents leave the runtime part and join the
named file, and the model made of the files afterwards must equal the one before (checked
on a copy first; the file is replaced atomically, then the runtime files are removed).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from enmesh.compile import find_stack_file, load_stack
from enmesh.compile.stack import runtime_models
from enmesh.control.commands import stack_arguments
from enmesh.model import Model, load_model

HEADER = "# Moved from the runtime part of the model by `enmesh export` (the console's changes).\n"


class ExportError(Exception):
    """Nothing was moved; says why."""


def model_documents(files: list[Path]) -> list[dict[str, Any]]:
    """Every document of the model files `files`, in order (runtime part or git)."""
    documents: list[dict[str, Any]] = []
    for path in files:
        documents += [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
    return documents


def as_yaml(documents: list[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(documents, sort_keys=False, explicit_start=True) if documents else ""


def move_into(stack_file: Path, target: Path) -> int:
    """Move the runtime documents into `target` (a model file of the stack); how many."""
    stack, models = load_stack(stack_file)
    runtime = runtime_models(stack)
    in_git = [m for m in models if m not in runtime]
    if target.resolve() not in {m.resolve() for m in in_git}:
        listed = ", ".join(str(m) for m in in_git)
        raise ExportError(f"{target} is not one of stack {stack.name!r}'s model files ({listed})")
    documents = model_documents(runtime)
    if not documents:
        return 0
    before = load_model(models)
    text = target.read_text(encoding="utf-8")
    moved = text + ("" if text.endswith("\n") else "\n") + HEADER + as_yaml(documents)
    candidate = target.with_name(f".{target.name}.export")
    candidate.write_text(moved, encoding="utf-8")
    try:
        after = load_model([candidate if m.resolve() == target.resolve() else m for m in in_git])
        if not _same(before, after):
            raise ExportError("the model would change; nothing was moved")
        candidate.replace(target)
    finally:
        candidate.unlink(missing_ok=True)
    for path in runtime:
        path.unlink()
    return len(documents)


def _same(before: Model, after: Model) -> bool:
    return before.tenants == after.tenants and before.address_plans == after.address_plans


def _cmd_export(args: argparse.Namespace) -> int:
    stack_file = find_stack_file(args.stack, args.stacks_dir)
    if args.into is None:
        documents = model_documents(runtime_models(load_stack(stack_file)[0]))
        sys.stdout.write(as_yaml(documents))
        if not documents:
            print(f"stack {args.stack!r} has no runtime changes", file=sys.stderr)
        return 0
    count = move_into(stack_file, args.into)
    print(f"moved {count} documents into {args.into}" if count else "no runtime changes to move")
    return 0


def add_export(commands: Any, stacks_dir: Path) -> None:
    export = commands.add_parser(
        "export",
        help="print the console's changes as model YAML, or move them into a model file",
        description="The runtime part of stack NAME's model (documents the console added, "
        "kept beside the stack's state) as model YAML on stdout; with --into FILE, moved "
        "into FILE, one of the stack's model files, to commit (the model is unchanged).",
    )
    stack_arguments(export, stacks_dir)
    export.add_argument("--into", type=Path, metavar="FILE", help="a model file of the stack")
    export.set_defaults(run=_cmd_export)
