"""The stack's web console (enmesh-console): whether it runs, where, with which certificate.

The console changes the stack as `enmesh apply` does on its own host
(`enmesh.control.target.on_this_host`), with the deployer's model files and the runtime
part beside them; that needs every router and broker of the stack on that one host. So
it is on by default for a stack of one host (the local stack) and off for a site of
several hosts, which changes through its playbook. Asking for it there is a compile
error, not a console whose every change would fail.
"""

from __future__ import annotations

from enmesh.compile import administrator
from enmesh.compile.broker_nodes import broker_nodes
from enmesh.compile.errors import CompileError
from enmesh.compile.layout import Layout

COMPONENT = "console"  # its TLS file stem


def stack_hosts(layout: Layout) -> set[str]:
    brokers = layout.stack.spec.brokers
    return {r.host for r in layout.routers} | {n.host for b in brokers for n in broker_nodes(b)}


def enabled(layout: Layout) -> bool:
    wanted = layout.stack.spec.console.enabled
    hosts = stack_hosts(layout)
    if wanted and len(hosts) > 1:
        raise CompileError(
            f"spec.console.enabled: the console applies changes on its own host, and this "
            f"stack spans {len(hosts)} hosts ({', '.join(sorted(hosts))}); a site changes "
            "through its playbook: set spec.console.enabled to false"
        )
    return len(hosts) == 1 if wanted is None else wanted


def listen_host(layout: Layout) -> str:
    return layout.stack.spec.console.host or layout.routers[0].host


def settings(layout: Layout) -> dict[str, str | int | bool] | None:
    """`deploy.json`'s `console` (without its certificate), or None when it does not run.
    `requested`: the stack file asked for it (else it is on by default, and the role
    leaves it out with a warning where it cannot run, on a host reached over SSH)."""
    if not enabled(layout):
        return None
    return {
        "host": listen_host(layout),
        "port": layout.stack.spec.console.port,
        "administrator": administrator.IDENTITY,
        "requested": layout.stack.spec.console.enabled is True,
    }
