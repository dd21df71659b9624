"""`make setup` did its job, and a second run is a fast no-op."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_proton_links_cyrus_sasl() -> None:
    import proton  # noqa: PLC0415 - the import itself is part of what is tested

    assert proton.SASL.extended(), "python-qpid-proton must be built from its sdist with Cyrus"


def test_second_setup_run_changes_nothing() -> None:
    result = subprocess.run(
        ["bash", "scripts/setup.sh"],
        cwd=ROOT,
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "    all present" in result.stdout
    assert "    exists" in result.stdout
    assert "SASL.extended() is true" in result.stdout
    assert "    up to date" in result.stdout
