"""The router's Python log level from a config's `log { module: DEFAULT enable: ... }`.

qdrouterd's levels are trace, debug, info, notice, warning, error, critical; `info+` means
info and above, a comma list names levels one by one (the lowest one listed is used here,
as Python has one threshold), `none` turns logging off.
"""

from __future__ import annotations

import logging

from enmesh.router.config_model import RouterConfig

_LEVELS = {
    "trace": logging.DEBUG,
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "notice": logging.WARNING,  # between info and warning: Python has no such level
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}
OFF = logging.CRITICAL + 10


def configured_level(config: RouterConfig) -> int | None:
    """The level the DEFAULT log module's `enable` sets; None if the config sets none."""
    enable = next((log.enable for log in config.logs if log.module == "DEFAULT"), None)
    if enable is None:
        return None
    if enable.strip() == "none":
        return OFF
    levels = [_LEVELS[part.strip().rstrip("+")] for part in enable.split(",")]
    return min(levels)
