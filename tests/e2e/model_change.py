"""A changed copy of the local stack: the deployed model plus a queue `e2e-live` that both
iot users may use. The e2e tests apply it to the running stack and then apply the
deployed stack again."""

from __future__ import annotations

from pathlib import Path

STACKS = Path(__file__).resolve().parents[2] / "stacks"
LIVE_QUEUE = "e2e-live"


def changed_stack(directory: Path) -> Path:
    """Write the changed model and a stack file naming it into `directory`; the stack file."""
    model = (STACKS / "iot.model.yml").read_text()
    (directory / "iot.model.yml").write_text(
        model.replace(
            "addresses: [telemetry, events, readings]",
            f"addresses: [telemetry, events, readings, {LIVE_QUEUE}]",
        ).replace(
            "addresses: [telemetry, events, readings, alerts, audit, dlq]",
            f"addresses: [telemetry, events, readings, alerts, audit, dlq, {LIVE_QUEUE}]",
        )
        + f"\n---\napiVersion: enmesh.io/v1\nkind: Address\nmetadata: {{name: iot.{LIVE_QUEUE}}}\n"
        f"spec: {{addressSpace: iot, address: {LIVE_QUEUE}, type: queue, plan: standard-queue}}\n"
    )
    stack_file = directory / "local.stack.yml"
    stack_file.write_text((STACKS / "local.stack.yml").read_text())
    return stack_file
