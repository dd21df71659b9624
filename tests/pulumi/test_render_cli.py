"""`enmesh render --stack NAME --k8s-out DIR` with the installed console script."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from tests.pulumi.conftest import ROOT

ENMESH = Path(sys.executable).with_name("enmesh")


def _render(project: Path, stack: str, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ENMESH), "render", "--stack", stack, "--k8s-out", str(out)],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_render_writes_every_object_once_and_is_stable(tmp_path: Path) -> None:
    out = tmp_path / "k8s"
    first = _render(ROOT, "aws", out)
    assert first.returncode == 0, first.stderr
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.yaml"))
    assert "_cluster/namespace-enmesh.yaml" in files
    assert "enmesh/statefulset-aws-router.yaml" in files
    assert len(files) == int(first.stdout.split("objects valid")[0].split()[-1])
    router = yaml.safe_load((out / "enmesh/statefulset-aws-router.yaml").read_text())
    assert router["spec"]["replicas"] == 2  # integers, not the wire format's doubles
    key = yaml.safe_load((out / "enmesh/secret-aws-router-tls.yaml").read_text())
    assert key["stringData"]["router-0-client.key"] == (
        "-----BEGIN PRIVATE KEY-----\n<generated>\n-----END PRIVATE KEY-----\n"
    )
    assert "mocksecret" not in "".join(p.read_text() for p in out.rglob("*.yaml"))
    second = _render(ROOT, "aws", out)
    assert second.returncode == 0
    assert " changed " not in second.stdout
    assert second.stdout.count("unchanged") == len(files)


def test_render_names_the_bad_key_and_writes_nothing(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(ROOT / "Pulumi.yaml", project / "Pulumi.yaml")
    shutil.copytree(ROOT / "stacks", project / "stacks")
    shutil.copytree(ROOT / "pulumi", project / "pulumi")
    stack_file = project / "stacks" / "Pulumi.aws.yaml"
    stack_file.write_text(
        stack_file.read_text().replace("enmesh:nodeCount: 3", "enmesh:nodeCount: 0")
    )
    out = tmp_path / "k8s"
    result = _render(project, "aws", out)
    assert result.returncode == 1
    assert "stacks/Pulumi.aws.yaml: invalid stack config" in result.stderr
    assert "enmesh:nodeCount: Input should be greater than or equal to 1 (got 0)" in result.stderr
    assert not out.exists()
    missing = _render(project, "digitalocean", out)
    assert missing.returncode == 1
    assert "no Kubernetes stack 'digitalocean'" in missing.stderr
    assert "known: aws, azure, baremetal, gcp, local" in missing.stderr
