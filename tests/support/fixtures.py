"""pytest fixtures built on tests.support; a conftest can re-export them with
`from tests.support.fixtures import *  # noqa: F403` or import them by name.

- `rendered_local_stack` (session): `enmesh render --stack local` into a temp dir, with
  the installed console script; the directory holds routers/, brokers/, auth/.
- `rabbitmq_broker` (session): a private RabbitMQ (see tests.support.rabbitmq) loaded
  with the local stack's compiled `brokers/broker-0.definitions.json`. Tests share it:
  drain what you use first, leave policies and users as you found them.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.rabbitmq import RabbitMQBroker
from tests.support.rabbitmq import rabbitmq_broker as _broker

ROOT = Path(__file__).resolve().parents[2]
ENMESH = Path(sys.executable).parent / "enmesh"


def render_stack(stack: str, out: Path) -> Path:
    """Run `enmesh render --stack STACK --out OUT` from the repository root; return OUT."""
    result = subprocess.run(
        [str(ENMESH), "render", "--stack", stack, "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    if result.returncode != 0:
        raise RuntimeError(f"enmesh render --stack {stack} failed: {result.stderr.strip()}")
    return out


@pytest.fixture(scope="session")
def rendered_local_stack(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return render_stack("local", tmp_path_factory.mktemp("render-local"))


@pytest.fixture(scope="session")
def rabbitmq_broker(
    tmp_path_factory: pytest.TempPathFactory, rendered_local_stack: Path
) -> Iterator[RabbitMQBroker]:
    definitions = rendered_local_stack / "brokers" / "broker-0.definitions.json"
    with _broker(tmp_path_factory.mktemp("rabbitmq"), definitions) as broker:
        yield broker
