"""Live reconfiguration: apply a desired RouterConfig to the running router, changing
only the difference.

The one core behind both front doors: a config reload (SIGHUP, `reload`) and AMQP
management writes (`management_writes`). What each change does while clients stay
connected (docs/router.md "Live changes"):

- addresses: new attaches get the new distribution and phases; the address's existing
  links keep theirs until they detach (as qdrouterd, whose links keep their phase);
- autoLinks: attached on (or detached from) the live broker connections at once;
- linkRoutes: new attaches use them; existing routed links stay until they close (as
  qdrouterd 1.19 does when a linkRoute is deleted); the mesh is told at once;
- vhost policies: new links are checked against the new rights at once; a client whose
  user (or address space) is gone is closed with amqp:unauthorized-access, no one else;
- listeners: added ones listen, removed ones stop accepting (their connections stay), a
  changed one with a new host or port rebinds, otherwise its next connections get the
  new settings; connectors: added ones connect, removed or changed ones close their
  connection (and reconnect, if changed); sslProfiles apply to the next connection;
- the router's `id` and `mode` cannot change while it runs: refused, nothing changes.

A change that cannot be made (a port that is taken, a password that cannot be read, a
router attribute) is refused before anything is touched.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, TypeVar

from enmesh.router import tenancy
from enmesh.router.config import (
    Address,
    Connector,
    Listener,
    RouterConfig,
    RouterConfigError,
    resolve_password,
)
from enmesh.router.connecting import ConnectorState
from enmesh.router.engine import Acceptor
from enmesh.router.log_level import configured_level
from enmesh.router.metrics import MetricsServer
from enmesh.router.security import SaslSettings

if TYPE_CHECKING:
    from enmesh.router.connecting import ConnectionInfo
    from enmesh.router.router import Router

log = logging.getLogger("enmesh.router.reconfigure")
UNAUTHORIZED = "amqp:unauthorized-access"
FORCED = "amqp:connection:forced"
LIVE_ROUTER_ATTRIBUTES = ("id", "mode")  # the rest of `router` may change live

T = TypeVar("T")


class ReconfigureError(Exception):
    """A change the running router refuses; nothing was changed."""


@dataclass
class Diff:
    added: list[Any] = field(default_factory=list)
    removed: list[Any] = field(default_factory=list)
    changed: list[tuple[Any, Any]] = field(default_factory=list)  # (old, new)

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)


def diff(old: Iterable[T], new: Iterable[T], key: Callable[[T], Hashable]) -> Diff:
    """What differs between two entity lists, entities matched by `key`."""
    before = {key(e): e for e in old}
    after = {key(e): e for e in new}
    return Diff(
        added=[e for k, e in after.items() if k not in before],
        removed=[e for k, e in before.items() if k not in after],
        changed=[(before[k], e) for k, e in after.items() if k in before and before[k] != e],
    )


def listener_name(listener: Listener) -> str:
    return listener.name or f"{listener.host}:{listener.port}"


def _address_key(address: Address) -> Hashable:
    if address.prefix is not None:
        return ("prefix", address.prefix)
    return ("pattern", address.pattern)


def _itself(entity: Hashable) -> Hashable:
    """autoLinks and linkRoutes: any change is a removal and an addition."""
    return entity


@dataclass
class Plan:
    """Every difference between the running config and the desired one."""

    ssl_profiles: Diff
    listeners: Diff
    connectors: Diff
    vhosts: Diff
    addresses: Diff
    link_routes: Diff
    auto_links: Diff
    router: list[str]  # attributes of `router` that change
    policy: bool  # the policy entity changes
    logs: bool

    @classmethod
    def between(cls, old: RouterConfig, new: RouterConfig) -> Plan:
        def name(entity: Any) -> Hashable:
            found: Hashable = entity.name
            return found

        return cls(
            ssl_profiles=diff(old.ssl_profiles, new.ssl_profiles, name),
            listeners=diff(old.listeners, new.listeners, listener_name),
            connectors=diff(old.connectors, new.connectors, name),
            vhosts=diff(old.vhosts, new.vhosts, lambda v: v.hostname),
            addresses=diff(old.addresses, new.addresses, _address_key),
            link_routes=diff(old.link_routes, new.link_routes, _itself),
            auto_links=diff(old.auto_links, new.auto_links, _itself),
            router=[
                f.name
                for f in fields(old.router)
                if getattr(old.router, f.name) != getattr(new.router, f.name)
            ],
            policy=old.policy != new.policy,
            logs=old.logs != new.logs,
        )

    def lines(self) -> list[str]:
        """One line per change, as the log and management report them."""
        found: list[str] = []
        labels: tuple[tuple[str, Diff, Callable[[Any], str]], ...] = (
            ("sslProfile", self.ssl_profiles, lambda e: repr(e.name)),
            ("listener", self.listeners, lambda e: repr(listener_name(e))),
            ("connector", self.connectors, lambda e: repr(e.name)),
            ("vhost", self.vhosts, lambda e: repr(e.hostname)),
            ("address", self.addresses, _describe_address),
            ("linkRoute", self.link_routes, _describe_link_route),
            ("autoLink", self.auto_links, _describe_auto_link),
        )
        for kind, changes, label in labels:
            found += [f"{kind} {label(e)} added" for e in changes.added]
            found += [f"{kind} {label(new)} changed" for _, new in changes.changed]
            found += [f"{kind} {label(e)} removed" for e in changes.removed]
        found += [f"router {name} changed" for name in self.router]
        if self.policy:
            found.append("policy changed")
        if self.logs:
            found.append("log settings changed")
        return found


def _describe_address(address: Any) -> str:
    return repr(address.prefix if address.prefix is not None else address.pattern)


def _describe_link_route(route: Any) -> str:
    return f"{route.direction} {route.prefix or route.pattern!r}"


def _describe_auto_link(auto: Any) -> str:
    return f"{auto.address!r} {auto.direction} {auto.external_address!r}"


class LiveConfig:
    """Applies desired configs to one running router; owns what main started for it."""

    def __init__(self, router: Router) -> None:
        self.router = router
        # Metrics (HTTP) listeners, by name: started by `start_http`, changed by `apply`.
        self.http: dict[str, Any] = {}
        self.on_applied: list[Callable[[RouterConfig, list[str]], None]] = []

    def start_http(self) -> None:
        for listener in self.router.config.listeners:
            if listener.http and listener.metrics:
                self.http[listener_name(listener)] = self._metrics_server(listener)

    def _metrics_server(self, listener: Listener) -> MetricsServer:
        return MetricsServer(self.router.loop, self.router, listener.host, listener.port)

    def apply(self, new: RouterConfig) -> list[str]:
        """Make the running router run `new`; the changes made, one line each.

        Raises ReconfigureError (and changes nothing) for a change it refuses.
        """
        router = self.router
        plan = Plan.between(router.config, new)
        fixed = [name for name in plan.router if name in LIVE_ROUTER_ATTRIBUTES]
        if fixed:
            changes = ", ".join(
                f"{name} {getattr(router.config.router, name)!s} -> {getattr(new.router, name)!s}"
                for name in fixed
            )
            raise ReconfigureError(
                f"router {changes}: cannot change while the router runs; restart it to apply"
            )
        self._check_secrets(new, plan)
        bound = self._bind(plan)  # may raise: nothing else has changed yet
        old = router.config
        router.config = new
        if "sasl_config_dir" in plan.router or "sasl_config_name" in plan.router:
            path = new.router.sasl_config_dir
            router.sasl = SaslSettings(str(path) if path else None, new.router.sasl_config_name)
        self._listeners(plan, bound)
        self._connectors(plan)
        if plan.vhosts or plan.policy:
            router.vhosts = {v.hostname: v for v in new.vhosts}
            self._readmit_clients()
        if plan.addresses or "default_distribution" in plan.router:
            for key, state in router.addresses.items():
                state.distribution = router.routing.semantics_of_key(key).distribution
        for auto in plan.auto_links.removed:
            router.link_routes.remove_auto_link(auto)
        for auto in plan.auto_links.added:
            router.link_routes.add_auto_link(auto)
        if plan.link_routes or plan.connectors:
            router.mesh_links.advertise_soon()  # which link routes this router serves
        if plan.logs and configured_level(new) != configured_level(old):
            logging.getLogger().setLevel(configured_level(new) or logging.INFO)
        router.routing.refresh_all()  # sources re-evaluated against the new addresses and links
        lines = plan.lines()
        for callback in self.on_applied:
            callback(new, lines)
        return lines

    # --- checks before anything changes ------------------------------------------------

    def _check_secrets(self, new: RouterConfig, plan: Plan) -> None:
        """Passwords of new or changed connectors and profiles must be readable now."""
        connectors = plan.connectors.added + [c for _, c in plan.connectors.changed]
        profiles = plan.ssl_profiles.added + [p for _, p in plan.ssl_profiles.changed]
        try:
            for connector in connectors:
                if connector.sasl_password:
                    resolve_password(connector.sasl_password)
            for profile in profiles:
                if profile.password:
                    resolve_password(profile.password)
        except RouterConfigError as exc:
            raise ReconfigureError(str(exc)) from None

    def _bind(self, plan: Plan) -> dict[str, Any]:
        """Listen on every new or moved listener's port first; undo all on a failure."""
        wanted = list(plan.listeners.added) + [
            new
            for old, new in plan.listeners.changed
            if (old.host, old.port, old.http) != (new.host, new.port, new.http)
        ]
        bound: dict[str, Any] = {}
        try:
            for listener in wanted:
                if listener.http and listener.metrics:
                    bound[listener_name(listener)] = self._metrics_server(listener)
                elif not listener.http:
                    bound[listener_name(listener)] = self._acceptor(listener)
        except OSError as exc:
            for server in bound.values():
                _close_server(server)
            raise ReconfigureError(
                f"listener {listener_name(listener)!r}: cannot listen on "
                f"{listener.host}:{listener.port}: {exc.strerror}"
            ) from None
        return bound

    def _acceptor(self, listener: Listener) -> Acceptor:
        router = self.router
        return Acceptor(
            router.loop,
            listener.host,
            listener.port,
            functools.partial(router.connecting.accept, listener),
        )

    # --- applying ------------------------------------------------------------------------

    def _listeners(self, plan: Plan, bound: dict[str, Any]) -> None:
        router = self.router
        for listener in plan.listeners.removed:
            self._stop_listening(listener)
        for old, new in plan.listeners.changed:
            name = listener_name(new)
            if name in bound:  # moved: the old socket goes, the new one is already bound
                self._stop_listening(old)
            else:
                acceptor = self._acceptor_of(old)
                if acceptor is not None:  # same socket, new settings for what it accepts
                    acceptor.on_accept = functools.partial(router.connecting.accept, new)
        for name, server in bound.items():
            if isinstance(server, Acceptor):
                router.acceptors.append(server)
            else:
                self.http[name] = server
        for listener in new_listeners(plan):
            name = listener_name(listener)
            if name not in router.admission.listeners:
                router.admission.listeners.append(name)

    def _stop_listening(self, listener: Listener) -> None:
        name = listener_name(listener)
        server = self.http.pop(name, None)
        if server is not None:
            _close_server(server)
        acceptor = self._acceptor_of(listener)
        if acceptor is not None:
            self.router.acceptors.remove(acceptor)
            acceptor.close()

    def _acceptor_of(self, listener: Listener) -> Acceptor | None:
        for acceptor in self.router.acceptors:
            accept = acceptor.on_accept
            if isinstance(accept, functools.partial) and accept.args[0] == listener:
                return acceptor
        return None

    def _connectors(self, plan: Plan) -> None:
        router = self.router
        for connector in [*plan.connectors.removed, *(old for old, _ in plan.connectors.changed)]:
            state = router.connectors.pop(connector.name, None)
            if state is not None and state.socket is not None:
                state.socket.abort(FORCED, f"connector {connector.name!r} changed or removed")
        for connector in [*plan.connectors.added, *(new for _, new in plan.connectors.changed)]:
            state = ConnectorState(connector)
            router.connectors[connector.name] = state
            router.connecting.connect(state)

    def _readmit_clients(self) -> None:
        """Open client connections under the new policies: rights for new links change
        at once; a connection whose user or address space is gone is closed."""
        router = self.router
        for conn in list(router.connections.values()):
            info: ConnectionInfo = conn.context["info"]
            if conn.closed or info.role != "normal" or info.outgoing or info.opened_at is None:
                continue
            authenticated = info.authenticated
            if not router.policy_enabled:
                info.vhost, info.group = None, None
                if authenticated is not None and authenticated.authz is not None:
                    info.group = tenancy.authz_group(authenticated.authz)
                continue
            hostname = (conn.connection.remote_hostname or "").split(":")[0]
            admitted = tenancy.admit(router.vhosts, hostname, info.user, authenticated)
            if isinstance(admitted, str):
                log.info("connection %s (%s): closed: %s", conn.peer, info.user, admitted)
                conn.abort(UNAUTHORIZED, admitted)
                continue
            info.vhost, info.group = admitted.vhost, admitted.group


def new_listeners(plan: Plan) -> list[Listener]:
    return [*plan.listeners.added, *(new for _, new in plan.listeners.changed)]


def _close_server(server: Any) -> None:
    acceptor: Acceptor = server if isinstance(server, Acceptor) else server.acceptor
    acceptor.close()


__all__ = ["Connector", "LiveConfig", "Plan", "ReconfigureError", "diff"]
