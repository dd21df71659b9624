"""The PLAY RECAP reader behind `enmesh up`'s change count, plain and coloured (molecule
sets ANSIBLE_FORCE_COLOR, and a coloured recap once read as no change at all)."""

from __future__ import annotations

from enmesh.deploy.stackctl import recap_counts

PLAIN = (
    "localhost                  : ok=41   changed=3    unreachable=0    failed=0    "
    "skipped=2    rescued=0    ignored=0   \n"
)
COLOURED = (
    "\x1b[0;33mlocalhost\x1b[0m                  : \x1b[0;32mok=41  \x1b[0m "
    "\x1b[0;33mchanged=3   \x1b[0m unreachable=0    \x1b[0;31mfailed=1   \x1b[0m "
    "skipped=2    rescued=0    ignored=0   \n"
)


def test_plain_recap_line() -> None:
    assert recap_counts(PLAIN) == (3, False)


def test_coloured_recap_line_counts_the_same() -> None:
    assert recap_counts(COLOURED) == (3, True)


def test_other_lines_are_not_recaps() -> None:
    assert recap_counts("TASK [enmesh_router : render] ****\n") is None
    assert recap_counts("ok: [localhost]\n") is None
