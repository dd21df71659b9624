"""`enmesh render` as a newcomer first runs it (issue 29, item 8): files written for the
first time are "new", and a reader that stops early (`| head`) is no error."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.unit.test_cli import ENMESH, ROOT, run


def test_first_render_says_new_then_unchanged(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = run("render", "--stack", "local", "--out", out)
    assert first.returncode == 0, first.stderr
    marks = [line.split()[0] for line in first.stdout.splitlines() if line.startswith("  ")]
    assert marks and set(marks) == {"new"}
    assert f"{len(marks)} file(s) changed ({len(marks)} new)" in first.stdout
    conf = out / "routers" / "local-router-0.conf"
    conf.write_text(conf.read_text() + "# edited\n")
    second = run("render", "--stack", "local", "--out", out)
    assert "  changed    routers/local-router-0.conf" in second.stdout
    assert "1 file(s) changed\n" in second.stdout


def test_a_reader_that_stops_early_is_no_error(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [str(ENMESH), "render", "--stack", "local", "--out", str(tmp_path / "out")],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # before enmesh writes its first line (it compiles first)
    stderr = process.stderr.read()
    process.wait(60)
    assert "Broken pipe" not in stderr and "Exception ignored" not in stderr, stderr
    assert (tmp_path / "out" / "manifest.json").is_file()  # the work itself was done
