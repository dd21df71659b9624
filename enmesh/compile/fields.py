"""Field types the stack file and its runtime part share."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

StackName = Annotated[
    str, StringConstraints(min_length=1, max_length=40, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
]
Port = Annotated[int, Field(strict=True, ge=1, le=65535)]
AbsolutePath = Annotated[str, StringConstraints(pattern=r"^/")]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
