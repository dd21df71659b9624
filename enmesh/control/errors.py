"""The control plane's refusal: apply changed nothing, and says why and what to do."""


class ApplyRefused(Exception):  # noqa: N818 (a refusal, not a crash)
    """Apply changed nothing; the message says why and what to do."""


class ApplyIncomplete(ApplyRefused):
    """Apply changed the routers and brokers but not all of the stack (Keycloak's users);
    the message says what is left, and running apply again finishes it."""
