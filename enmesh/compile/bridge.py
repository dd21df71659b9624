"""Bridges: this stack's routers joined to another stack's mesh (`enmesh migrate bridge`).

A bridge is part of the stack's runtime state, one file per peer stack,
`<paths.state>/runtime/bridge-<peer>.json`, written by `enmesh migrate bridge` and kept by
`enmesh apply`, `enmesh render` and the next `make up` as the runtime model part is. With
`connect`, each router of this stack opens an inter-router connection to each listed
router of the peer, so the two meshes route as one (credit and settlement end to end, as
within one mesh). With `brokers: peer`, this stack's routers drop their own broker
connections: stored addresses (queues, topics, subscriptions) are then served through the
mesh by the peer's brokers, which is how a migration's source hands its traffic over while
its stored backlog is moved.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from enum import StrEnum
from pathlib import Path
from typing import Annotated

from pydantic import Field, StringConstraints, ValidationError

from enmesh.compile.errors import CompileError
from enmesh.compile.fields import AbsolutePath, Port, StackName, Strict
from enmesh.compile.qdrouterd import Entity

RUNTIME_PREFIX = "bridge-"
INTER_ROUTER_TLS = "inter-router-tls"  # the stack's own inter-router profile
RouterId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][-A-Za-z0-9._]*$")]


class PeerRouter(Strict):
    """A router of the peer stack: its id and its inter-router listener."""

    id: RouterId
    host: str
    port: Port


class BridgeTls(Strict):
    """Files on this stack's router hosts: a certificate the peer's CA issued, and that CA.
    Absent: the stack's own inter-router profile (both stacks share one CA)."""

    caCertFile: AbsolutePath  # noqa: N815
    certFile: AbsolutePath  # noqa: N815
    privateKeyFile: AbsolutePath  # noqa: N815


class ClientEndpoint(Strict):
    """A router of the peer stack as clients reach it."""

    host: str
    amqp: Port
    amqps: Port


class BrokersFrom(StrEnum):
    OWN = "own"
    PEER = "peer"  # this stack's routers use the peer's brokers, through the mesh


class Bridge(Strict):
    peer: StackName
    connect: list[PeerRouter] = Field(default_factory=list)
    tls: BridgeTls | None = None
    brokers: BrokersFrom = BrokersFrom.OWN
    # Where this stack's clients are told to reconnect (the open frame's failover list),
    # instead of this stack's other routers: the peer's routers, while clients move there.
    failover: list[ClientEndpoint] = Field(default_factory=list)

    def text(self) -> str:
        return json.dumps(self.model_dump(mode="json", exclude_none=True), indent=2) + "\n"


def bridge_file(runtime: Path, peer: str) -> Path:
    return runtime / f"{RUNTIME_PREFIX}{peer}.json"


def read_bridges(runtime: Path) -> list[Bridge]:
    """The bridges in a stack's runtime part; CompileError naming the file if one is bad."""
    found = []
    for path in sorted(runtime.glob(f"{RUNTIME_PREFIX}*.json")) if runtime.is_dir() else []:
        try:
            found.append(Bridge.model_validate_json(path.read_text(encoding="utf-8")))
        except OSError as error:
            raise CompileError(f"{path}: cannot read it: {error.strerror}") from None
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(str(part) for part in e['loc']) or 'the file'}: {e['msg']}"
                for e in error.errors()
            )
            raise CompileError(f"{path}: not a bridge: {problems}") from None
    return found


def uses_peer_brokers(bridges: list[Bridge]) -> bool:
    return any(b.brokers is BrokersFrom.PEER for b in bridges)


def peer_routers(bridges: list[Bridge]) -> Iterator[tuple[Bridge, PeerRouter]]:
    for bridge in bridges:
        for router in bridge.connect:
            yield bridge, router


def bridge_entities(
    bridges: list[Bridge], own_routers: Iterable[str], tls_policy: Mapping[str, str]
) -> Iterator[Entity]:
    """sslProfiles and inter-router connectors of every router of this stack."""
    own = set(own_routers)
    peers = [bridge.peer for bridge in bridges]
    repeated = sorted({peer for peer in peers if peers.count(peer) > 1})
    if repeated:
        raise CompileError(
            f"more than one bridge to stack(s) {', '.join(repeated)} (spec.bridges and "
            "<paths.state>/runtime/bridge-<peer>.json together): keep one"
        )
    for bridge, router in peer_routers(bridges):
        if router.id in own:
            raise CompileError(
                f"bridge to stack {bridge.peer!r}: its router {router.id!r} has the id of a "
                "router of this stack (two stacks of one name cannot be bridged)"
            )
    for bridge in bridges:
        if bridge.tls is not None and bridge.connect:
            yield Entity(
                "sslProfile",
                {"name": bridge_profile(bridge), **bridge.tls.model_dump(), **tls_policy},
            )
    for bridge, router in peer_routers(bridges):
        yield Entity(
            "connector",
            {
                "name": f"{RUNTIME_PREFIX}{router.id}",
                "host": router.host,
                "port": router.port,
                "role": "inter-router",
                "sslProfile": bridge_profile(bridge),
                "verifyHostname": True,
                "saslMechanisms": ["EXTERNAL"],
            },
        )


def bridge_profile(bridge: Bridge) -> str:
    return f"{RUNTIME_PREFIX}{bridge.peer}-tls" if bridge.tls is not None else INTER_ROUTER_TLS


def failover_endpoints(bridges: list[Bridge]) -> list[ClientEndpoint]:
    return [endpoint for bridge in bridges for endpoint in bridge.failover]
