"""A user's authorized address patterns are checked against the space's addresses
(issue 29, item 1): a typo there used to validate, and lock the user out at run time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from enmesh.suggest import suggest

ROOT = Path(__file__).resolve().parents[2]
ENMESH = Path(sys.executable).parent / "enmesh"
SAMPLE = ROOT / "stacks" / "iot.model.yml"


def validate(text: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    model = tmp_path / "iot.model.yml"
    model.write_text(text, encoding="utf-8")
    return subprocess.run(
        [str(ENMESH), "validate", str(model)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_a_misspelt_address_is_an_error_with_a_suggestion(tmp_path: Path) -> None:
    text = SAMPLE.read_text(encoding="utf-8")
    typo = text.replace("addresses: [commands, broadcast]", "addresses: [commands, brodcast]")
    assert typo != text
    result = validate(typo, tmp_path)
    assert result.returncode == 1 and result.stdout == ""
    line = typo.splitlines().index("      addresses: [commands, brodcast]") + 1
    assert (
        f"{tmp_path / 'iot.model.yml'}:{line}: document 17 (MessagingUser/iot.device): "
        "spec.authorization[1].addresses[1]: no address 'brodcast' in address space 'iot'; "
        "did you mean 'broadcast'?"
    ) in result.stderr


def test_a_subscription_may_be_named_either_way(tmp_path: Path) -> None:
    text = SAMPLE.read_text(encoding="utf-8")
    linked = text.replace("alerts, audit, dlq]", "alerts, 'alerts::audit', dlq]")
    assert linked != text
    result = validate(linked, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


def test_a_prefix_matching_nothing_is_a_warning(tmp_path: Path) -> None:
    text = SAMPLE.read_text(encoding="utf-8")
    prefixed = text.replace("addresses: [commands, broadcast]", "addresses: [commands, 'cmd/*']")
    assert prefixed != text
    result = validate(prefixed, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok: 2 address spaces")
    assert "warning: " in result.stderr
    assert "pattern 'cmd/*' matches no address in space 'iot' yet" in result.stderr
    assert "spec.authorization[1].addresses[1]" in result.stderr


def test_suggestions() -> None:
    known = ["alerts", "alerts::audit", "broadcast", "commands"]
    assert suggest("audit", known) == "; did you mean 'alerts::audit'?"
    assert suggest("comands", known) == "; did you mean 'commands'?"
    assert suggest("zzz", known) == ""
