"""`enmesh migrate bridge` to a site of hosts: the source's routers dial the site's.

Between two stacks of one host the target's routers connect to the source's. A site's
routers cannot: the source (the deployer's local stack) listens on loopback, while every
site router listens on its host's address, which the deployer reaches. So here the
source's routers open the inter-router connections, with a certificate the site's CA
issued (kept in the source's TLS directory, as the deployer keeps the site's CA key), and
the site is not changed at all: its inter-router listeners accept any router certificate
of their CA, and the routers then route as one mesh whichever side dialled.

One bridge file of the source holds both steps: `connect` first, until every router of
both stacks reaches every other; then `brokers: peer` and the site's routers as the
failover list, as between two stacks of one host. `enmesh migrate bridge --remove` (and
`finish --purge`) remove that file: the source's side is the whole bridge.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from enmesh.compile import load_stack
from enmesh.compile.bridge import Bridge, BrokersFrom, bridge_file
from enmesh.compile.stack import runtime_dir
from enmesh.control.target import router_files
from enmesh.migrate.bridge import (
    Bridged,
    Side,
    apply_change,
    bridge_files,
    check_target_serves_source,
    client_endpoints,
    inter_router_listeners,
    issued_tls,
    wait_joined,
    write_bridge,
)
from enmesh.migrate.ends import MigrateError
from enmesh.migrate.site import Site


def _existing(path: Path, peer: str) -> Bridge:
    """The bridge file as a previous run left it (a rerun keeps its later step)."""
    if not path.is_file():
        return Bridge(peer=peer)
    return Bridge.model_validate_json(path.read_text(encoding="utf-8"))


def bridge_to_site(
    source: Side, site: Site, *, timeout: float = 60.0, echo: Callable[[str], None] = print
) -> Bridged:
    site_stack, site_models = load_stack(site.stack_file)
    name = site_stack.name
    if source.stack.name == name:
        raise MigrateError(f"both stacks are named {name!r}: their routers' ids collide")
    check_target_serves_source(source.loaded[1], site_models)
    deployment = site.deployment()
    path = bridge_file(runtime_dir(source.stack), name)
    files = bridge_files(source.stack, Path(source.deployment["ca"]), name, site.ca)
    found: list[str] = []

    def join() -> None:
        tls, certificate = issued_tls(
            files, site.ca, site.ca_key, f"bridge-{source.stack.name}", "the site's"
        )
        found.append(certificate)
        update = {"connect": inter_router_listeners(deployment), "tls": tls}
        write_bridge(path, _existing(path, name).model_copy(update=update).text())

    routers = [*source.target.routers, *router_files(deployment, site.build_dir)]
    apply_change(
        source,
        [path, *(files.paths() if files else ())],
        join,
        echo,
        then=lambda: wait_joined(routers, timeout),
    )
    handover = _existing(path, name).model_copy(
        update={"brokers": BrokersFrom.PEER, "failover": client_endpoints(deployment)}
    )
    apply_change(source, [path], lambda: write_bridge(path, handover.text()), echo)
    links = len(source.target.routers) * len(deployment["routers"])
    return Bridged(
        source.stack.name,
        name,
        links,
        found[0],
        dialer=source.stack.name,
        to_option=f"--to-inventory {site.inventory}",
    )
