"""The stack's `security` section: login throttling and handshake limits for the routers.

qdrouterd 1.19 has a listener attribute for the handshake timeout
(`initialHandshakeTimeoutSeconds`), which the router configs carry; it has nothing for
throttling or for limits on connections still in their handshake, and it refuses
unknown entities and attributes. So those go into a file of their own,
`auth/admission.json`, which enmesh-router reads with `--admission` (see
enmesh.router.admission) and other engines never see.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

ADMISSION_FILE = "auth/admission.json"
Positive = Annotated[int, Field(strict=True, ge=1)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LoginThrottle(_Strict):
    """After `maxFailures` failed logins from one address within `windowSeconds`, that
    address is refused for `cooldownSeconds`: an online guesser gets about 10 guesses
    in 2 minutes instead of hundreds a second, and a user who mistyped waits a minute."""

    maxFailures: Positive = 10  # noqa: N815
    windowSeconds: Positive = 60  # noqa: N815
    cooldownSeconds: Positive = 60  # noqa: N815


class Handshake(_Strict):
    """A connection must send its AMQP open (after TLS and SASL) within `timeoutSeconds`;
    connections still in their handshake are limited per listener and per source."""

    timeoutSeconds: Positive = 10  # noqa: N815
    maxPendingPerListener: Positive = 4000  # noqa: N815
    maxPendingPerSource: Positive = 1000  # noqa: N815


class SecurityPolicy(_Strict):
    loginThrottle: LoginThrottle = Field(default_factory=LoginThrottle)  # noqa: N815
    handshake: Handshake = Field(default_factory=Handshake)


def admission(policy: SecurityPolicy) -> dict[str, Any]:
    """The content of `auth/admission.json` (the handshake timeout is in the configs)."""
    handshake = policy.handshake
    return {
        "loginThrottle": policy.loginThrottle.model_dump(),
        "handshake": {
            "maxPendingPerListener": handshake.maxPendingPerListener,
            "maxPendingPerSource": handshake.maxPendingPerSource,
        },
    }
