"""Management's entity types, with qdrouterd 1.19's names, bases and attributes.

Configuration entity types and their attributes come from the config table
(`config_schema`), so config loading, management and the generated reference name the
same things; what only a running router reports (counters, status) and qdrouterd's
operational types (connection, router.link, ...) are listed here. The names are checked
against qdrouterd's by tests/unit/test_management_schema.py.

Every type offers READ, the management node QUERY and the GET-* operations; the writes
qdrouterd 1.19 answers are in `WRITES` (applied by `management_writes`); its own extras
(GET-SCHEMA, GET-LOG, PROFILE) are not offered.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from enmesh.router.config_schema import ENTITY_TYPES, SCHEMA

PREFIX = "org.apache.qpid.dispatch."
NODE_TYPE = "org.amqp.management"  # what a request to the node itself names as its type
NODE_OPERATIONS = (
    *("QUERY", "GET-TYPES", "GET-ANNOTATIONS", "GET-OPERATIONS", "GET-ATTRIBUTES"),
    "GET-MGMT-NODES",
)
BASE_ATTRIBUTES = ("name", "identity", "type")
_CREATE_DELETE = ("CREATE", "DELETE")
# The writes qdrouterd 1.19 answers for a type (its other configuration types: none here).
WRITES: Mapping[str, tuple[str, ...]] = {
    "router.config.address": _CREATE_DELETE,
    "router.config.autoLink": _CREATE_DELETE,
    "router.config.linkRoute": _CREATE_DELETE,
    "listener": _CREATE_DELETE,
    "connector": _CREATE_DELETE,
    "vhost": ("CREATE", "UPDATE", "DELETE"),
}
# qdrouterd's C agent also updates a connection's adminStatus (to close it), though its
# schema, and so GET-OPERATIONS, lists READ only.
UNLISTED_WRITES: Mapping[str, tuple[str, ...]] = {"connection": ("UPDATE",)}


@dataclass(frozen=True)
class ManagedType:
    short: str  # as qdrouterd's schema file names it: `connection`, `router.config.address`
    base: str | None
    own_attributes: tuple[str, ...] = ()
    own_operations: tuple[str, ...] = ()
    # qdrouterd's C agent answers a QUERY without attribute names with these columns, in
    # this order (its Python agent with the schema's attributes).
    query_columns: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return PREFIX + self.short

    def bases(self) -> list[ManagedType]:
        found: list[ManagedType] = []
        base = self.base
        while base is not None:
            found.append(TYPES[base])
            base = TYPES[base].base
        return found

    def attributes(self) -> list[str]:
        """Own attributes, then each base's (qdrouterd's order)."""
        names = list(self.own_attributes)
        for base in self.bases():
            names += [n for n in base.own_attributes if n not in names]
        return names

    def operations(self) -> list[str]:
        ops = list(self.own_operations)
        for base in self.bases():
            ops += base.own_operations
        return ops

    def columns(self) -> list[str]:
        return list(self.query_columns) or self.attributes()


def _names(text: str) -> tuple[str, ...]:
    return tuple(text.split())


# What a running router reports beside the settable attributes of configuration entities.
REPORTED: Mapping[str, tuple[str, ...]] = {
    "router": _names(
        "area version hostName addrCount linkCount blockedLinkCount nodeCount linkRouteCount "
        "autoLinkCount connectionCount presettledDeliveries droppedPresettledDeliveries "
        "acceptedDeliveries rejectedDeliveries releasedDeliveries modifiedDeliveries "
        "deliveriesDelayed1Sec deliveriesDelayed10Sec deliveriesStuck deliveriesIngress "
        "deliveriesEgress deliveriesTransit deliveriesIngressRouteContainer "
        "deliveriesEgressRouteContainer deliveriesRedirectedToFallback uptimeSeconds memoryUsage"
    ),
    "connector": _names("failoverUrls connectionStatus connectionMsg"),
    "router.config.linkRoute": _names("operStatus"),
    "router.config.autoLink": _names("linkRef operStatus lastError"),
    "router.config.exchange": _names(
        "bindingCount receivedCount droppedCount forwardedCount divertedCount"
    ),
    "router.config.binding": _names("matchedCount"),
    "policy": _names(
        "connectionsProcessed connectionsDenied connectionsCurrent linksDenied "
        "maxMessageSizeDenied totalDenials"
    ),
    "vhost": _names("maxMessageSize"),
}

_CORE_COLUMNS: Mapping[str, tuple[str, ...]] = {
    "router": _names(
        "name identity id type mode area version metadata addrCount linkCount nodeCount "
        "linkRouteCount autoLinkCount connectionCount presettledDeliveries "
        "droppedPresettledDeliveries acceptedDeliveries rejectedDeliveries releasedDeliveries "
        "modifiedDeliveries deliveriesDelayed1Sec deliveriesDelayed10Sec deliveriesStuck "
        "deliveriesIngress deliveriesEgress deliveriesTransit deliveriesIngressRouteContainer "
        "deliveriesEgressRouteContainer deliveriesRedirectedToFallback linksBlocked "
        "uptimeSeconds memoryUsage workerThreads"
    ),
    "connection": _names(
        "name identity host role protocol dir container sasl isAuthenticated user isEncrypted "
        "sslProto sslCipher properties sslSsf tenant type ssl opened active adminStatus "
        "operStatus uptimeSeconds lastDlvSeconds enableProtocolTrace"
    ),
    "router.link": _names(
        "name identity type linkName linkType linkDir owningAddr capacity peer "
        "undeliveredCount unsettledCount deliveryCount connectionId adminStatus operStatus "
        "presettledCount droppedPresettledCount acceptedCount rejectedCount releasedCount "
        "modifiedCount deliveriesDelayed1Sec deliveriesDelayed10Sec deliveriesStuck "
        "ingressHistogram priority settleRate creditAvailable zeroCreditSeconds"
    ),
    "router.address": _names(
        "name identity type key distribution inProcess subscriberCount remoteCount "
        "containerCount remoteHostRouters deliveriesIngress deliveriesEgress deliveriesTransit "
        "deliveriesToContainer deliveriesFromContainer deliveriesEgressRouteContainer "
        "deliveriesIngressRouteContainer transitOutstanding trackedDeliveries priority "
        "deliveriesRedirectedToFallback"
    ),
}

_OPERATIONAL: Mapping[str, str] = {
    "logStats": "traceCount debugCount infoCount noticeCount warningCount errorCount criticalCount",
    "router.link": "adminStatus operStatus linkName linkType linkDir owningAddr capacity peer "
    "undeliveredCount unsettledCount deliveryCount presettledCount droppedPresettledCount "
    "acceptedCount rejectedCount releasedCount modifiedCount deliveriesDelayed1Sec "
    "deliveriesDelayed10Sec deliveriesStuck creditAvailable zeroCreditSeconds settleRate "
    "ingressHistogram priority",
    "router.address": "distribution inProcess subscriberCount remoteCount containerCount "
    "deliveriesIngress deliveriesEgress deliveriesTransit deliveriesToContainer "
    "deliveriesFromContainer deliveriesIngressRouteContainer deliveriesEgressRouteContainer "
    "deliveriesRedirectedToFallback key remoteHostRouters transitOutstanding "
    "trackedDeliveries priority",
    "router.node": "id protocolVersion instance linkState nextHop validOrigins address "
    "routerLink cost lastTopoChange index",
    "connection": "adminStatus operStatus protocol container opened host dir role "
    "isAuthenticated isEncrypted enableProtocolTrace sasl user ssl sslProto sslCipher sslSsf "
    "tenant uptimeSeconds properties lastDlvSeconds",
    "allocator": "typeName typeSize transferBatchSize localFreeListMax globalFreeListMax "
    "totalAllocFromHeap totalFreeToHeap heldByThreads batchesRebalancedToThreads "
    "batchesRebalancedToGlobal",
    "vhostStats": "id hostname connectionsApproved connectionsDenied connectionsCurrent "
    "perUserState perHostState sessionDenied senderDenied receiverDenied maxMessageSizeDenied",
}


def _configuration_types() -> list[ManagedType]:
    found = []
    for entity in ENTITY_TYPES:
        short = entity.long_name.removeprefix(PREFIX)
        own = [a.name for a in entity.attributes if a.name not in BASE_ATTRIBUTES]
        own += [n for n in REPORTED.get(short, ()) if n not in own]
        columns = _CORE_COLUMNS.get(short, ())
        writes = WRITES.get(short, ())
        found.append(ManagedType(short, "configurationEntity", tuple(own), writes, columns))
    return found


def _all_types() -> list[ManagedType]:
    return [
        ManagedType("entity", None, BASE_ATTRIBUTES),
        ManagedType(NODE_TYPE, "operationalEntity", (), NODE_OPERATIONS),
        ManagedType("management", NODE_TYPE),
        ManagedType("configurationEntity", "entity", (), ("READ",)),
        ManagedType("operationalEntity", "entity", (), ("READ",)),
        *_configuration_types(),
        *(
            ManagedType(
                short,
                "operationalEntity",
                _names(names),
                WRITES.get(short, ()),
                _CORE_COLUMNS.get(short, ()),
            )
            for short, names in _OPERATIONAL.items()
        ),
        # qdrouterd's per-connection link routes; enmesh-router has none.
        ManagedType(
            "router.connection.linkRoute",
            "configurationEntity",
            _names("pattern direction containerId"),
        ),
    ]


TYPES: dict[str, ManagedType] = {t.short: t for t in _all_types()}


def find(name: str | None) -> ManagedType | None:
    """The type `name` names, long (`org.apache.qpid.dispatch.connection`) or short."""
    if not name:
        return None
    if name == NODE_TYPE:
        return TYPES[NODE_TYPE]
    short = name.removeprefix(PREFIX)
    if short not in TYPES and short in SCHEMA:  # a config file's name: `address`, `autoLink`
        short = SCHEMA[short].long_name.removeprefix(PREFIX)
    return TYPES.get(short)


def by_type(wanted: ManagedType | None) -> list[ManagedType]:
    """Every type that is or extends `wanted` (all of them for None)."""
    return [t for t in TYPES.values() if wanted is None or t is wanted or wanted in t.bases()]
