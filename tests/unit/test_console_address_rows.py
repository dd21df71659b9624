"""The console's consumer and producer counts per address, from router.link rows as
management reports them: owningAddr is qdrouterd's hash key (class, phase, address), so a
queue's consumers (phase 1) and producers (phase 0) both count, and another space's
address that merely ends the same way does not."""

from __future__ import annotations

from typing import Any

from enmesh.console.mesh import Router
from enmesh.console.views import RouterView, address_rows
from enmesh.model import load_model
from tests.support.mesh import SAMPLE_MODEL


def _link(owning: str, direction: str, kind: str = "endpoint") -> dict[str, Any]:
    return {"owningAddr": owning, "linkDir": direction, "linkType": kind}


def test_links_count_for_their_own_address_only() -> None:
    model = load_model([SAMPLE_MODEL])
    iot = next(t for t in model.tenants if t.name == "iot")
    view = RouterView(
        Router("router-0", "amqps://127.0.0.1:5671"),
        links=[
            _link("M0iot/telemetry", "out"),
            _link("M0iot/telemetry", "in"),
            _link("M0iot/telemetry", "in"),
            _link("M1iot/events", "out"),  # a queue's consumer: phase 1, from the broker
            _link("M0iot/events", "in"),  # its producer: phase 0, to the broker
            _link("M0xiot/events", "out"),  # another space ending the same way
            _link("M0iot/telemetry", "out", kind="inter-router"),  # the mesh, not a client
        ],
    )
    rows = {row.address: row for row in address_rows(iot, set(), [view], {})}
    assert (rows["telemetry"].consumers, rows["telemetry"].producers) == (1, 2)
    assert (rows["events"].consumers, rows["events"].producers) == (1, 1)
    assert (rows["commands"].consumers, rows["commands"].producers) == (0, 0)
