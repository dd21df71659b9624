"""`did you mean ...?` for a name that is not there, shared by the model checks, the
router's refusals and the CLI (difflib from the standard library does the matching)."""

from __future__ import annotations

from collections.abc import Iterable
from difflib import get_close_matches


def suggest(name: str, known: Iterable[str]) -> str:
    """`; did you mean 'x'?` for the closest known names, or "" when none is close.

    A subscription is named by its model name as often as by its link address, so a
    known `topic::name` is suggested for `name` even though the strings are far apart.
    """
    candidates = sorted(set(known))
    close = [k for k in candidates if k.endswith(f"::{name}")]
    close += [k for k in get_close_matches(name, candidates, n=3, cutoff=0.6) if k not in close]
    if not close:
        return ""
    return f"; did you mean {' or '.join(repr(k) for k in close[:3])}?"
