"""`enmesh smoke` / `make up`'s smoke check: every AMQP check (enmesh.deploy.smoke), then
the MQTT gateways' (enmesh.deploy.smoke_mqtt), one line each."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

from enmesh.deploy.smoke import Skipped, SmokeCheck, Stack


def run_smoke(stack: Stack, report: Callable[[str], None] = print) -> bool:
    """Run every check, reporting one line each; true if none failed."""
    # Imported here: the smoke check runs on the deployer, whose venv has paho-mqtt; the
    # hosts' venv (the enmesh wheel alone) imports this module through the CLI.
    from enmesh.deploy.smoke_mqtt import mqtt_checks  # noqa: PLC0415

    ok = True
    for check in itertools.chain(SmokeCheck(stack).checks(), mqtt_checks(stack)):
        started = time.monotonic()
        label = f"{check.kind:<12} {check.space}/{check.address}"
        try:
            detail = check.run()
        except Skipped as exc:
            report(f"  skip  {label}: {exc}")
            continue
        except Exception as exc:
            ok = False
            report(f"  FAIL  {label}: {exc}")
            continue
        elapsed = (time.monotonic() - started) * 1000
        report(f"  ok    {label}  {detail}  ({elapsed:.0f} ms)")
    return ok
