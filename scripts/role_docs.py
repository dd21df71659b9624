"""Print, write or check docs/roles.md's role-variable tables, generated from each role's
meta/argument_specs.yml.

.venv/bin/python scripts/role_docs.py            # print the tables
.venv/bin/python scripts/role_docs.py --write    # rewrite them in docs/roles.md
.venv/bin/python scripts/role_docs.py --check    # exit 1 if docs/roles.md is out of date
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "roles.md"
BEGIN, END = "<!-- role-variables:begin -->", "<!-- role-variables:end -->"


def _cell(value: object) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=1000).strip()
    text = text.removesuffix("...").strip()
    return text.replace("|", "\\|").replace("\n", " ")


def tables() -> str:
    out = []
    for spec_file in sorted(ROOT.glob("roles/*/meta/argument_specs.yml")):
        role = spec_file.parts[-3]
        specs = yaml.safe_load(spec_file.read_text())["argument_specs"]
        for entry, spec in specs.items():
            title = f"`{role}`" if entry == "main" else f"`{role}` (`tasks_from: {entry}`)"
            out.append(f"## {title}: {spec.get('short_description', '')}\n")
            out.append("| variable | type | default | meaning |")
            out.append("| --- | --- | --- | --- |")
            for name, option in sorted(spec.get("options", {}).items()):
                default = "(required)" if option.get("required") else _cell(option.get("default"))
                description = option.get("description", "")
                if isinstance(description, list):
                    description = " ".join(description)
                out.append(
                    f"| `{name}` | {option.get('type', 'str')} | {default} | {description} |"
                )
            out.append("")
    return "\n".join(out).rstrip() + "\n"


def main() -> int:
    generated = f"{BEGIN}\n{tables()}{END}"
    if "--check" not in sys.argv and "--write" not in sys.argv:
        print(generated)
        return 0
    page = PAGE.read_text(encoding="utf-8")
    start, end = page.find(BEGIN), page.find(END)
    if start < 0 or end < 0:
        print(f"{PAGE} has no {BEGIN} ... {END} block", file=sys.stderr)
        return 1
    if "--write" in sys.argv:
        PAGE.write_text(page[:start] + generated + page[end + len(END) :], encoding="utf-8")
        return 0
    if page[start : end + len(END)] != generated:
        print(f"{PAGE} is out of date: run scripts/role_docs.py --write", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
