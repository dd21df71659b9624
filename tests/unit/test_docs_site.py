"""The documentation site builds strictly (a broken link, anchor or nav entry fails), the
README's links land on real pages and anchors, the performance page is generated from
benchmarks/results/, and the commands of the getting-started page and the README's tour
are ones the CLI and the Makefile accept (issue 29: the docs cannot drift from the code)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from enmesh.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
MKDOCS = Path(sys.executable).parent / "mkdocs"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [str(MKDOCS), "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
        env=os.environ | {"NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "WARNING" not in result.stderr, result.stderr
    return out


def _page(site: Path, doc: str) -> Path:
    """The built HTML of docs/<doc> (use_directory_urls: x.md -> x/index.html)."""
    name = doc.removesuffix(".md")
    return site / ("index.html" if name == "index" else f"{name}/index.html")


def test_every_docs_page_is_on_the_site(site: Path) -> None:
    for doc in sorted((ROOT / "docs").glob("*.md")):
        assert _page(site, doc.name).is_file(), doc.name


def test_readme_links_resolve(site: Path) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = LINK.findall(readme)
    assert targets, "the README links to the docs"
    for target in targets:
        if target.startswith(("http://", "https://")):
            continue
        path, _, anchor = target.partition("#")
        assert (ROOT / path).exists(), f"README links to missing {path}"
        if path.startswith("docs/") and path.endswith(".md"):
            html = _page(site, path.removeprefix("docs/")).read_text(encoding="utf-8")
            if anchor:
                assert f'id="{anchor}"' in html, f"README links to missing anchor {target}"


def test_performance_page_is_generated_from_the_results() -> None:
    result = subprocess.run(
        [sys.executable, "scripts/results_docs.py", "--check"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr


def _commands(markdown: Path) -> list[list[str]]:
    """The commands of the `sh` blocks: continuation lines joined, comments dropped."""
    blocks = re.findall(r"```sh\n(.*?)```", markdown.read_text(encoding="utf-8"), re.S)
    commands = []
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words and words[-1] == "&":
                words.pop()
            if words:
                commands.append(words)
    return commands


MAKE_TARGETS = set(re.findall(r"^([a-z-]+):", (ROOT / "Makefile").read_text(), re.M))


@pytest.mark.parametrize("page", ["docs/getting-started.md", "README.md"])
def test_documented_commands_are_ones_the_code_accepts(page: str) -> None:
    commands = _commands(ROOT / page)
    assert len(commands) >= 5
    for words in commands:
        if words[0] == "make":
            assert set(words[1:]) <= MAKE_TARGETS, f"{page}: {words}"
        elif words[0] == ".venv/bin/enmesh":
            try:
                build_parser().parse_args(words[1:])
            except SystemExit as exc:  # argparse's way of refusing
                pytest.fail(f"{page}: enmesh refuses {shlex.join(words)} ({exc})")
        else:
            pytest.fail(f"{page}: a command no check covers: {shlex.join(words)}")


def test_the_validate_command_of_the_getting_started_page_passes() -> None:
    validate = next(w for w in _commands(ROOT / "docs/getting-started.md") if "validate" in w)
    result = subprocess.run(
        [str(Path(sys.executable).parent / "enmesh"), *validate[1:]],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0 and result.stdout.startswith("ok: "), result.stderr
