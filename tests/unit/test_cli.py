"""The `enmesh` console script, run as a user runs it: a real process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENMESH = Path(sys.executable).parent / "enmesh"


def run(*args: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ENMESH), *map(str, args)],
        cwd=cwd,
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_console_script_is_installed() -> None:
    assert ENMESH.is_file(), "make setup installs the enmesh console script into .venv"


@pytest.mark.parametrize("command", [[], ["validate"], ["render"]])
def test_help_everywhere(command: list[str]) -> None:
    result = run(*command, "--help")
    assert result.returncode == 0
    assert result.stdout.startswith("usage: enmesh")
    expected = {"": "validate", "validate": "FILE", "render": "--stack NAME"}
    assert expected[" ".join(command)] in result.stdout


def test_no_command_is_a_usage_error() -> None:
    result = run()
    assert result.returncode == 2 and "required: COMMAND" in result.stderr


def test_validate_sample_model() -> None:
    result = run("validate", "stacks/iot.model.yml")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok: 2 address spaces, 10 addresses, 3 users in 1 file(s)"


def test_validate_broken_model_prints_every_problem(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    broken.write_text(
        "apiVersion: enmesh.io/v1\nkind: Address\nmetadata: {name: iot.x}\n"
        "spec: {addressSpace: iot, address: x, type: queue, plan: nope, ttl: 5}\n"
        "---\n"
        "apiVersion: enmesh.io/v1\nkind: MessagingUser\nmetadata: {name: iot.eve}\n"
        "spec:\n  addressSpace: iot\n  username: eve\n  authentication: {password: s3cr3t}\n"
    )
    result = run("validate", "stacks/iot.model.yml", broken)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr and result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines[0] == "error: 2 problems in the model"
    assert lines[1] == (
        f"  {broken}:4: document 1 (Address/iot.x): spec.ttl: unknown field; expected one of: "
        "address, addressSpace, deadLetterAddress, maxDeliveries, plan, topic, ttlSeconds, type"
    )
    assert lines[2].startswith(
        f"  {broken}:12: document 2 (MessagingUser/iot.eve): spec.authentication.password: "
    )
    assert "s3cr3t" not in result.stderr


def test_validate_missing_file_is_a_clean_error(tmp_path: Path) -> None:
    result = run("validate", tmp_path / "nope.yml")
    assert result.returncode == 1 and "cannot read file" in result.stderr
    assert "Traceback" not in result.stderr


def test_render_writes_every_artefact_then_changes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = run("render", "--stack", "local", "--out", out)
    assert first.returncode == 0, first.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert sorted(manifest["files"]) == sorted(
        str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and p.name != "manifest.json"
    )
    assert "routers/local-router-0.conf" in manifest["files"]
    assert f"{len(manifest['files'])} file(s) changed" in first.stdout
    second = run("render", "--stack", "local", "--out", out)
    assert second.returncode == 0 and "0 file(s) changed" in second.stdout
    golden = ROOT / "tests/golden/local/brokers/broker-0.definitions.json"
    assert (out / "brokers/broker-0.definitions.json").read_text() == golden.read_text()


def test_render_removes_files_a_previous_render_wrote(tmp_path: Path) -> None:
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    (stacks / "iot.model.yml").write_text((ROOT / "stacks/iot.model.yml").read_text())
    stack_text = (ROOT / "stacks/local.stack.yml").read_text()
    (stacks / "s.stack.yml").write_text(stack_text)
    out = tmp_path / "out"
    assert run("render", "--stack", "s", "--out", out, "--stacks-dir", stacks).returncode == 0
    (stacks / "s.stack.yml").write_text(stack_text.replace("count: 3", "count: 2"))
    result = run("render", "--stack", "s", "--out", out, "--stacks-dir", stacks)
    assert "removed    routers/local-router-2.conf" in result.stdout
    assert not (out / "routers/local-router-2.conf").exists()
    assert (out / "routers/local-router-1.conf").exists()


def test_render_unknown_stack_names_known_ones(tmp_path: Path) -> None:
    result = run("render", "--stack", "mars", "--out", tmp_path)
    assert result.returncode == 1
    assert "no stack 'mars'" in result.stderr
    known = result.stderr.split("known stacks: ", 1)[1].rstrip(")\n").split(", ")
    assert {"local", "keycloak"} <= set(known)


def test_render_invalid_model_writes_nothing(tmp_path: Path) -> None:
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    (stacks / "bad.model.yml").write_text("apiVersion: enmesh.io/v1\nkind: AddressSpace\n")
    (stacks / "bad.stack.yml").write_text(
        "apiVersion: enmesh.io/v1\nkind: Stack\nmetadata: {name: bad}\n"
        "spec: {models: [bad.model.yml], brokers: [{name: b0}]}\n"
    )
    out = tmp_path / "out"
    result = run("render", "--stack", "bad", "--out", out, "--stacks-dir", stacks)
    assert (
        result.returncode == 1
        and "bad.model.yml:1: document 1 (AddressSpace): spec: required field is missing"
        in result.stderr
    )
    assert not out.exists()


def test_render_invalid_stack_file_is_located(tmp_path: Path) -> None:
    stack = tmp_path / "x.stack.yml"
    stack.write_text(
        "apiVersion: enmesh.io/v1\nkind: Stack\nmetadata: {name: x}\n"
        "spec:\n  models: [m.yml]\n  brokers: []\n  routers: {count: 0}\n"
    )
    result = run("render", "--stack", stack, "--out", tmp_path / "out")
    assert result.returncode == 1
    assert f"{stack}:6: document 1 (Stack/x): spec.brokers:" in result.stderr
    assert f"{stack}:7: document 1 (Stack/x): spec.routers.count:" in result.stderr
