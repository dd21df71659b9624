"""`make up` after a model change applies it live: site.yml (what `make up` runs) with a
changed model reloads the routers rather than restarting them, the new queue carries a
message, and site.yml with the deployed model again removes it, after which a further
run changes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from proton import Message

from enmesh.deploy.smoke import Stack
from enmesh.deploy.stackctl import Project
from tests.e2e.model_change import LIVE_QUEUE, changed_stack

ROOT = Path(__file__).resolve().parents[2]


def _make_up(stack_file: Path | None = None) -> int:
    """site.yml as `make up` runs it (optionally for another stack file); its changes."""
    extra = ("-e", f"enmesh_stack_file={stack_file}") if stack_file else ()
    return Project(ROOT, "local").playbook("site.yml", *extra)


def _router_pids(host: Any, deployment: dict[str, Any]) -> dict[str, int]:
    return {
        name: host.supervisor(name).pid
        for name in (f"enmesh-router-{r['id']}" for r in deployment["routers"])
    }


def test_make_up_applies_a_model_change_without_restarting_a_router(
    host: Any, deployment: dict[str, Any], stack: Stack, tmp_path: Path
) -> None:
    pids = _router_pids(host, deployment)
    try:
        assert _make_up(changed_stack(tmp_path)) > 0
        assert _router_pids(host, deployment) == pids
        with stack.connect(stack.urls[0], "device@iot", "iot") as connection:
            connection.create_sender(LIVE_QUEUE).send(Message(body="through make up"))
        with stack.connect(stack.urls[-1], "backend@iot", "iot") as connection:
            receiver = connection.create_receiver(LIVE_QUEUE)
            assert receiver.receive(timeout=30).body == "through make up"
            receiver.accept()
    finally:
        _make_up()  # the deployed model again: the queue goes
    assert _make_up() == 0
    assert _router_pids(host, deployment) == pids
