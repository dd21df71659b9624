"""The address model's kinds, in the style of EnMasse's custom resources.

Each class validates one document on its own; references between documents are
checked in `enmesh.model.checks`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

API_VERSION = "enmesh.io/v1"

# Kubernetes object names (RFC 1123, dots allowed as in EnMasse's `space.address`).
OBJECT_NAME = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
# Address spaces become vhosts, DNS names and broker name prefixes: one label, no dots.
SPACE_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# An AMQP address as clients use it. `::` is reserved for `topic::subscription`.
AMQP_ADDRESS = r"^[A-Za-z0-9_][A-Za-z0-9_.\-/]*$"
# An authorization pattern: an address, optionally ending in `*` (any suffix).
ADDRESS_PATTERN = r"^(\*|[A-Za-z0-9_][A-Za-z0-9_.\-/:]*\*?)$"

ObjectName = Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=OBJECT_NAME)]
SpaceName = Annotated[str, StringConstraints(min_length=1, max_length=63, pattern=SPACE_NAME)]
AmqpAddress = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=AMQP_ADDRESS)]
AddressPattern = Annotated[
    str, StringConstraints(min_length=1, max_length=200, pattern=ADDRESS_PATTERN)
]
Username = Annotated[
    str, StringConstraints(min_length=1, max_length=64, pattern=r"^[a-z0-9][-a-z0-9_.]*$")
]
PositiveInt = Annotated[int, Field(strict=True, ge=1)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AddressType(StrEnum):
    ANYCAST = "anycast"
    MULTICAST = "multicast"
    QUEUE = "queue"
    TOPIC = "topic"
    SUBSCRIPTION = "subscription"
    DEADLETTER = "deadletter"

    @property
    def is_direct(self) -> bool:
        """Direct addresses are routed producer to consumer and never stored."""
        return self in (AddressType.ANYCAST, AddressType.MULTICAST)


class SpaceType(StrEnum):
    STANDARD = "standard"  # router mesh in front of brokers
    BROKERED = "brokered"  # clients connect to the broker directly


class Operation(StrEnum):
    SEND = "send"
    RECV = "recv"
    MANAGE = "manage"


class Metadata(_Strict):
    name: ObjectName
    labels: dict[str, str] = Field(default_factory=dict)


class _Document(_Strict):
    apiVersion: Literal["enmesh.io/v1"]  # noqa: N815 - Kubernetes field name
    metadata: Metadata

    @property
    def name(self) -> str:
        return self.metadata.name


# --- plans -------------------------------------------------------------------------------


class ResourceLimits(_Strict):
    connections: PositiveInt
    addresses: PositiveInt
    routers: PositiveInt = 1
    brokers: PositiveInt = 1


class AddressSpacePlanSpec(_Strict):
    addressSpaceType: SpaceType  # noqa: N815
    resourceLimits: ResourceLimits  # noqa: N815
    addressPlans: list[ObjectName] = Field(min_length=1)  # noqa: N815
    displayName: str = ""  # noqa: N815


class AddressSpacePlan(_Document):
    kind: Literal["AddressSpacePlan"]
    spec: AddressSpacePlanSpec


class AddressPlanSpec(_Strict):
    addressType: AddressType  # noqa: N815
    partitions: PositiveInt = 1
    displayName: str = ""  # noqa: N815


class AddressPlan(_Document):
    kind: Literal["AddressPlan"]
    spec: AddressPlanSpec


# --- tenants and addresses ---------------------------------------------------------------


class SpaceAuthentication(_Strict):
    allowAnonymous: bool = False  # noqa: N815


class AddressSpaceSpec(_Strict):
    type: SpaceType
    plan: ObjectName
    authentication: SpaceAuthentication = Field(default_factory=SpaceAuthentication)


class SpaceMetadata(Metadata):
    name: SpaceName  # becomes a vhost name and a DNS label


class AddressSpace(_Document):
    kind: Literal["AddressSpace"]
    metadata: SpaceMetadata
    spec: AddressSpaceSpec


# Which optional Address settings make sense for which address types.
SETTING_APPLIES_TO: dict[str, frozenset[AddressType]] = {
    "ttlSeconds": frozenset({AddressType.QUEUE, AddressType.SUBSCRIPTION, AddressType.DEADLETTER}),
    "maxDeliveries": frozenset({AddressType.QUEUE, AddressType.SUBSCRIPTION}),
    "deadLetterAddress": frozenset({AddressType.QUEUE, AddressType.SUBSCRIPTION}),
    "topic": frozenset({AddressType.SUBSCRIPTION}),
}


class AddressSpec(_Strict):
    addressSpace: SpaceName  # noqa: N815
    address: AmqpAddress
    type: AddressType
    plan: ObjectName
    ttlSeconds: PositiveInt | None = None  # noqa: N815
    maxDeliveries: PositiveInt | None = None  # noqa: N815
    deadLetterAddress: AmqpAddress | None = None  # noqa: N815
    topic: AmqpAddress | None = None

    def misplaced_settings(self) -> list[str]:
        """Settings given that do not apply to this address type."""
        return [
            setting
            for setting, types in SETTING_APPLIES_TO.items()
            if getattr(self, setting) is not None and self.type not in types
        ]


class Address(_Document):
    kind: Literal["Address"]
    spec: AddressSpec


class SecretKeyRef(_Strict):
    """A key in a secret (a Kubernetes Secret, or `<secrets dir>/<name>/<key>` on hosts)."""

    name: ObjectName
    key: Annotated[str, StringConstraints(pattern=r"^[-._a-zA-Z0-9]+$")]


class UserAuthentication(_Strict):
    type: Literal["password"] = "password"
    passwordSecret: SecretKeyRef  # noqa: N815


class AuthorizationRule(_Strict):
    operations: list[Operation] = Field(min_length=1)
    addresses: list[AddressPattern] = Field(default_factory=list)

    @model_validator(mode="after")
    def _addresses_needed_for_send_recv(self) -> AuthorizationRule:
        if not self.addresses and set(self.operations) - {Operation.MANAGE}:
            raise ValueError("send and recv need at least one address pattern in `addresses`")
        return self


class MessagingUserSpec(_Strict):
    addressSpace: SpaceName  # noqa: N815
    username: Username
    authentication: UserAuthentication
    authorization: list[AuthorizationRule] = Field(default_factory=list)

    def patterns_for(self, operation: Operation) -> list[str]:
        return sorted(
            {
                p
                for rule in self.authorization
                if operation in rule.operations
                for p in rule.addresses
            }
        )

    def may(self, operation: Operation) -> bool:
        return any(operation in rule.operations for rule in self.authorization)


class MessagingUser(_Document):
    kind: Literal["MessagingUser"]
    spec: MessagingUserSpec


Document = AddressSpacePlan | AddressPlan | AddressSpace | Address | MessagingUser

KINDS: dict[str, type[Document]] = {
    "AddressSpacePlan": AddressSpacePlan,
    "AddressPlan": AddressPlan,
    "AddressSpace": AddressSpace,
    "Address": Address,
    "MessagingUser": MessagingUser,
}
