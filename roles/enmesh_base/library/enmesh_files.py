#!/usr/bin/python
"""Ansible module: install a set of small files (content, owner, group, mode) in one run."""

from __future__ import annotations

import grp
import os
import pwd
import tempfile
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: enmesh_files
short_description: Install many small files in one module run
description:
  - Writes each file atomically when its content differs and sets its owner, group and
    mode; creates missing parent directories with the given directory owner and mode.
  - One run instead of one per file (the copy module costs two module runs per file),
    so a host's certificates, keys, configs and secrets install in about a second.
  - Contents come from the task (e.g. lookup('file', ..., rstrip=false)); use no_log on
    tasks carrying secrets. Supports check mode.
options:
  dest: {description: Destination paths., type: list, elements: path, required: true}
  content:
    description: Texts to write, one per destination (same order).
    type: list
    elements: str
    required: true
  owner: {description: Owner of every file., type: str, default: root}
  group: {description: Group of every file., type: str, default: root}
  mode: {description: Octal mode of every file, e.g. "0640"., type: str, default: "0644"}
  directory_group: {description: Group of created parent directories., type: str, default: root}
  directory_mode: {description: Mode of created parent directories., type: str, default: "0755"}
"""

RETURN = r"""
changed_paths:
  description: Files whose content or attributes changed (or would).
  type: list
  returned: always
"""


def _ids(module: AnsibleModule, owner: str, group: str) -> tuple[int, int]:
    try:
        return pwd.getpwnam(owner).pw_uid, grp.getgrnam(group).gr_gid
    except KeyError as exc:
        module.fail_json(msg=f"unknown account: {exc.args[0]}")
        raise


def _make_parents(module: AnsibleModule, spec: dict) -> None:
    missing = [p for p in Path(spec["path"]).parents if not p.is_dir()]
    _, gid = _ids(module, "root", spec["directory_group"])
    mode = int(spec["directory_mode"], 8)
    for directory in reversed(missing):
        directory.mkdir(mode)
        os.chown(directory, 0, gid)
        directory.chmod(mode)  # mkdir's mode is filtered by the umask


def install(module: AnsibleModule, spec: dict) -> bool:
    path = Path(spec["path"])
    uid, gid = _ids(module, spec["owner"], spec["group"])
    mode = int(spec["mode"], 8)
    data = spec["content"].encode()
    try:
        same_content = path.read_bytes() == data
        status = path.stat()
        same_attributes = (status.st_uid, status.st_gid, status.st_mode & 0o7777) == (
            uid,
            gid,
            mode,
        )
    except FileNotFoundError:
        same_content = same_attributes = False
    if same_content and same_attributes:
        return False
    if module.check_mode:
        return True
    _make_parents(module, spec)
    if not same_content:
        descriptor, name = tempfile.mkstemp(dir=path.parent, prefix=".enmesh-")
        temporary = Path(name)
        try:
            os.fchmod(descriptor, mode)
            os.fchown(descriptor, uid, gid)
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(data)
            temporary.replace(path)
        finally:
            temporary.unlink(missing_ok=True)
    os.chown(path, uid, gid)
    path.chmod(mode)
    return True


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "dest": {"type": "list", "elements": "path", "required": True},
            "content": {"type": "list", "elements": "str", "required": True, "no_log": True},
            "owner": {"type": "str", "default": "root"},
            "group": {"type": "str", "default": "root"},
            "mode": {"type": "str", "default": "0644"},
            "directory_group": {"type": "str", "default": "root"},
            "directory_mode": {"type": "str", "default": "0755"},
        },
        supports_check_mode=True,
    )
    params = module.params
    if len(params["dest"]) != len(params["content"]):
        module.fail_json(
            msg=f"{len(params['dest'])} destinations but {len(params['content'])} contents"
        )
    shared = {k: v for k, v in params.items() if k not in ("dest", "content")}
    specs = [
        {**shared, "path": path, "content": text}
        for path, text in zip(params["dest"], params["content"], strict=True)
    ]
    changed = [spec["path"] for spec in specs if install(module, spec)]
    module.exit_json(changed=bool(changed), changed_paths=changed)


if __name__ == "__main__":
    main()
