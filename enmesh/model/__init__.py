"""The declarative address model: kinds, validation with precise locations, loading."""

from enmesh.model.kinds import (
    Address,
    AddressSpace,
    AddressType,
    MessagingUser,
    Operation,
    SpaceType,
)
from enmesh.model.model import Model, Tenant, load_model, validate_files
from enmesh.model.problems import ModelInvalidError, Problem

__all__ = [
    "Address",
    "AddressSpace",
    "AddressType",
    "MessagingUser",
    "Model",
    "ModelInvalidError",
    "Operation",
    "Problem",
    "SpaceType",
    "Tenant",
    "load_model",
    "validate_files",
]
