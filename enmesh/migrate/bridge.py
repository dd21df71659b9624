"""`enmesh migrate bridge`: the source's and the target's meshes route as one.

1. Every router of the target opens an inter-router connection to every router of the
   source (a runtime bridge of the target, enmesh.compile.bridge), with a certificate the
   source's CA issued when the stacks have different CAs. Both meshes then know every
   address and consumer: a producer on one side reaches a consumer on the other, with
   credit only while that consumer is reachable and its outcome back end to end.
2. Once every router reaches the other side's, the source's routers drop their broker
   connections (a runtime bridge of the source, `brokers: peer`): stored addresses on the
   source are served through the mesh by the target's brokers, so nothing new is stored
   on the source while `enmesh migrate move-stored` drains it. Clients attached to a
   source broker through a link route (topic subscribers) are detached and attach again
   to the target's broker. The source's routers now list the target's routers as where
   their clients should reconnect (the open frame's failover list).

Both steps go through `enmesh apply` on each stack (one apply at a time per stack). If a
step fails (a target that cannot reach the source within the timeout, an apply that
fails, Ctrl-C), its files go back as they were and its stack is applied again to match;
a first step that succeeded stays (run `--remove` to undo it). `unbridge` undoes either
side, and needs only that side: `enmesh migrate finish --purge` and `--remove` unbridge
the target also when the source is gone.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from enmesh.compile import load_stack
from enmesh.compile.bridge import (
    Bridge,
    BridgeTls,
    BrokersFrom,
    ClientEndpoint,
    PeerRouter,
    bridge_file,
)
from enmesh.compile.stack import Stack, runtime_dir
from enmesh.control.apply import apply_stack
from enmesh.control.putback import put_back_on_failure
from enmesh.control.routers import RouterFiles, metrics_text
from enmesh.control.target import Target, installed_deployment
from enmesh.deploy.secrets import replace_file
from enmesh.migrate import bridge_tls
from enmesh.migrate.ends import MigrateError
from enmesh.model import load_model

_REACHABLE = re.compile(r"^enmesh_router_reachable_routers(?:\{[^}]*\})? (\S+)$", re.MULTILINE)


@dataclass
class Bridged:
    source: str
    target: str
    links: int  # inter-router connections between the two
    certificate: str  # "shared CA", "issued by the source's CA" or "certificate kept"
    dialer: str = ""  # the stack whose routers connect (default: the target)
    to_option: str = ""  # how the CLI names the target (default: --to TARGET)

    def text(self) -> str:
        dialer = self.dialer or self.target
        other = self.source if dialer == self.target else self.target
        return (
            f"{self.target} and {self.source} route as one mesh: {self.links} inter-router "
            f"connection(s) from {dialer}'s routers to {other}'s ({self.certificate}); "
            f"{self.source}'s routers use {self.target}'s brokers. Move the stored messages "
            f"next: `enmesh migrate move-stored --from {self.source} "
            f"{self.to_option or '--to ' + self.target}`."
        )


@dataclass(frozen=True)
class Side:
    """One stack of the migration, as `enmesh apply` reaches it on this host. Its files
    are read once: a bridge step changes only runtime bridges, which nothing here reads."""

    stack_file: Path
    target: Target

    @cached_property
    def loaded(self) -> tuple[Stack, list[Path]]:
        return load_stack(self.stack_file)

    @property
    def stack(self) -> Stack:
        return self.loaded[0]

    @cached_property
    def deployment(self) -> dict[str, Any]:
        return installed_deployment(self.stack_file)


def _address_types(model_files: list[Path]) -> dict[tuple[str, str], str]:
    model = load_model(model_files)
    return {
        (tenant.name, a.spec.address): str(a.spec.type)
        for tenant in model.tenants
        for a in tenant.addresses
    }


def check_target_serves_source(source: list[Path], target: list[Path]) -> None:
    """Both stacks' model files (their runtime parts included)."""
    have = _address_types(target)
    lacking = [
        f"{space}/{address} ({kind})"
        for (space, address), kind in sorted(_address_types(source).items())
        if have.get((space, address)) != kind
    ]
    if lacking:
        raise MigrateError(
            "the target does not serve these addresses of the source as the source does (run "
            "`enmesh migrate prepare` first; nothing was changed): " + ", ".join(lacking)
        )


def client_endpoints(deployment: dict[str, Any]) -> list[ClientEndpoint]:
    return [
        ClientEndpoint(host=r["host"], amqp=r["ports"]["amqp"], amqps=r["ports"]["amqps"])
        for r in deployment["routers"]
    ]


def inter_router_listeners(deployment: dict[str, Any]) -> list[PeerRouter]:
    return [
        PeerRouter(id=r["id"], host=r["host"], port=r["ports"]["interRouter"])
        for r in deployment["routers"]
    ]


def bridge_files(
    dialler: Stack, dialler_ca: Path, peer: str, peer_ca: Path
) -> bridge_tls.BridgeFiles | None:
    """Where the dialling stack keeps the certificate from its peer's CA; None if the two
    share a CA (its routers then use their own certificates)."""
    if dialler_ca.read_bytes() == peer_ca.read_bytes():
        return None
    return bridge_tls.files_for(tls_dir(dialler), peer)


def tls_dir(stack: Stack) -> Path:
    return Path(stack.spec.paths.state) / "tls"


def _bridge_tls(
    source: Side, target: Side, files: bridge_tls.BridgeFiles | None, ca_key: Path | None
) -> tuple[BridgeTls | None, str]:
    key = ca_key or Path(source.stack.spec.paths.state) / "pki" / "ca.key"
    return issued_tls(
        files, Path(source.deployment["ca"]), key, f"bridge-{target.stack.name}", "the source's"
    )


def issued_tls(
    files: bridge_tls.BridgeFiles | None, ca: Path, ca_key: Path, common_name: str, issuer: str
) -> tuple[BridgeTls | None, str]:
    """The connecting routers' profile (None: the stacks share a CA), and how it came."""
    if files is None:
        return None, "shared CA"
    issued = bridge_tls.ensure_bridge_certificate(files, ca, ca_key, common_name)
    tls = BridgeTls(
        caCertFile=str(files.ca), certFile=str(files.cert), privateKeyFile=str(files.key)
    )
    return tls, f"issued by {issuer} CA" if issued else "certificate kept"


def write_bridge(path: Path, text: str) -> None:
    """In one rename: a bridge file cut short would stop every command on the stack."""
    if not (path.is_file() and path.read_text(encoding="utf-8") == text):
        replace_file(path, text.encode("utf-8"), mode=0o644)


def apply_change(
    side: Side,
    paths: list[Path],
    write: Callable[[], None],
    echo: Callable[[str], None],
    then: Callable[[], None] = lambda: None,
) -> None:
    """`write` files, apply the stack, then `then`. On any failure (Ctrl-C included) the
    files go back as they were and the stack is applied again to match them."""
    written = False
    try:
        with put_back_on_failure(paths):
            write()
            written = True
            apply_stack(side.stack_file, side.target, echo=echo)
            then()
    except BaseException:
        if written:
            try:
                apply_stack(side.stack_file, side.target, echo=echo)
            except Exception as error:  # the first failure is the one to raise
                echo(
                    f"warning: stack {side.stack.name!r} may differ from its files ({error}); "
                    f"run `enmesh apply --stack {side.stack.name}`"
                )
        raise


def reachable_routers(metrics_url: str) -> int | None:
    """How many other routers one router reaches; None if it does not answer."""
    try:
        found = _REACHABLE.search(metrics_text(metrics_url))
    except OSError:  # urllib's URLError is one
        return None
    return int(float(found[1])) if found else None


def wait_joined(routers: list[RouterFiles], timeout: float) -> None:
    """Until every router of both stacks reaches every other one."""
    wanted = len(routers) - 1
    deadline = time.monotonic() + timeout
    while True:
        # At least: a source still bridged to a third stack reaches more.
        short = [r.id for r in routers if (reachable_routers(r.metrics_url) or 0) < wanted]
        if not short:
            return
        if time.monotonic() > deadline:
            raise MigrateError(
                f"after {timeout:.0f} s these routers do not reach all {wanted} others of "
                f"both stacks: {', '.join(short)} (is the source's inter-router listener "
                "reachable from the target's routers? their logs say why)"
            )
        time.sleep(0.5)


def bridge(
    source: Side,
    target: Side,
    *,
    ca_key: Path | None = None,
    timeout: float = 60.0,
    echo: Callable[[str], None] = print,
) -> Bridged:
    source_name, target_name = source.stack.name, target.stack.name
    if source_name == target_name:
        raise MigrateError(f"both stacks are named {source_name!r}: their routers' ids collide")
    check_target_serves_source(source.loaded[1], target.loaded[1])
    files = bridge_files(
        target.stack, Path(target.deployment["ca"]), source_name, Path(source.deployment["ca"])
    )
    peers = inter_router_listeners(source.deployment)
    joining = bridge_file(runtime_dir(target.stack), source_name)
    found: list[str] = []

    def join() -> None:
        tls, certificate = _bridge_tls(source, target, files, ca_key)
        found.append(certificate)
        write_bridge(joining, Bridge(peer=source_name, connect=peers, tls=tls).text())

    apply_change(
        target,
        [joining, *(files.paths() if files else ())],
        join,
        echo,
        then=lambda: wait_joined([*source.target.routers, *target.target.routers], timeout),
    )
    handing = bridge_file(runtime_dir(source.stack), target_name)
    handover = Bridge(
        peer=target_name, brokers=BrokersFrom.PEER, failover=client_endpoints(target.deployment)
    )
    apply_change(source, [handing], lambda: write_bridge(handing, handover.text()), echo)
    links = len(peers) * len(target.target.routers)
    return Bridged(source_name, target_name, links, found[0])


def unbridge_side(side: Side, peer: str, echo: Callable[[str], None] = print) -> bool:
    """Remove this stack's bridge to `peer` and apply, then delete the bridge certificate;
    returns whether there was a bridge. Only this stack is needed: the peer may be gone."""
    stack = side.stack
    path = bridge_file(runtime_dir(stack), peer)
    if not path.exists():
        return False
    apply_change(side, [path], path.unlink, echo)
    bridge_tls.remove(bridge_tls.files_for(tls_dir(stack), peer))
    return True


def unbridge(
    source: Side | None, target: Side, source_name: str, echo: Callable[[str], None] = print
) -> list[str]:
    """The source takes its brokers back first, then the target leaves the source's mesh.
    `source` None: it is gone, only the target's part is undone."""
    undone = []
    if source is not None and unbridge_side(source, target.stack.name, echo):
        undone.append(f"{source_name}'s routers use their own brokers again")
    if unbridge_side(target, source_name, echo):
        undone.append(f"{target.stack.name}'s routers no longer connect to {source_name}'s")
    return undone
