"""Semantics a router engine may provide, each defined by the config names it needs.

A feature is provided when an engine accepts every (entity, attribute) it names, so an
engine's features follow from its list of names and cannot drift from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True)
class FeatureSpec:
    label: str  # what a user reads in a refusal
    names: tuple[tuple[str, str | None], ...]  # (entity, attribute); None: the entity itself
    why: str  # what the model uses it for


class Feature(Enum):
    LINK_ROUTES = FeatureSpec(
        "link routes (linkRoute)",
        (("linkRoute", None),),
        "a topic's live subscriber gets its own temporary broker queue per link, and a "
        "subscription is consumed from its durable queue",
    )
    WAYPOINTS = FeatureSpec(
        "waypoints (address waypoint, autoLink phase)",
        (("address", "waypoint"), ("autoLink", "phase")),
        "queue and deadletter traffic goes through the broker: senders reach the queue "
        "(phase 0), consumers are fed from it (phase 1) on one address",
    )
    MULTI_TENANT = FeatureSpec(
        "multi-tenant listeners (listener multiTenant)",
        (("listener", "multiTenant"),),
        "a client's addresses are scoped to the address space its open frame names",
    )
    VHOST_POLICY = FeatureSpec(
        "vhost policy (policy enableVhostPolicy, vhost)",
        (("policy", "enableVhostPolicy"), ("vhost", "groups")),
        "per-space users, limits and allowed addresses",
    )
    AUTH_SERVICE_PLUGIN = FeatureSpec(
        "an external auth service (authServicePlugin)",
        (("authServicePlugin", None), ("listener", "saslPlugin")),
        "SASL delegated to an AMQP auth service (enmesh-auth, backed by Keycloak; "
        "spec.identity.provider keycloak, or enmesh:identity sasldb to keep the routers' "
        "own database)",
    )
    SASL_CONFIG_DIR = FeatureSpec(
        "Cyrus SASL configuration directory (router saslConfigDir)",
        (("router", "saslConfigDir"),),
        "where the router finds the SASL config and user database",
    )
    SASL_CONFIG_PATH = FeatureSpec(
        "router saslConfigPath (qdrouterd's deprecated name of saslConfigDir)",
        (("router", "saslConfigPath"),),
        "nothing: the compiler writes saslConfigDir",
    )

    @property
    def label(self) -> str:
        return self.value.label
