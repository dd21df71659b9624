"""Bounded session incoming windows: how Q2 hold-off reaches the sender.

When the router stops reading a large message (Q2, enmesh.router.streaming), proton
would otherwise go on taking the sender's frames into its own buffers without limit.
With a window of N frames (the listener's or connector's `maxSessionFrames`), proton
buffers at most N x maxFrameSize bytes per session and re-opens the window, half a
window at a time, only as the router reads.

As in qdrouterd 1.19, the window is unbounded unless `maxSessionFrames` is set. A bound
has costs a user should choose: a client that closes its connection right after a burst
of presettled sends loses what its proton had not yet written (the window held it), and
on an inter-router connection a stalled large message closes the window that every
other link of that session shares until its receiver reads again.

proton 0.40's C API has this (`pn_session_set_incoming_window_and_lwm`, which replaces
the byte "capacity" that the Python binding still wraps); its Python binding does not
declare it, so it is called here through ctypes on the very library the binding loaded.
"""

from __future__ import annotations

import ctypes

import cproton_ffi
from proton import Session

_lib = ctypes.CDLL(cproton_ffi.__file__)
_set_window = _lib.pn_session_set_incoming_window_and_lwm
_set_window.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint32]
_set_window.restype = ctypes.c_int


def _address(session: Session) -> int:
    return int(cproton_ffi.ffi.cast("uintptr_t", session._impl))


def bound(session: Session, frames: int) -> None:
    """Bound `session`'s incoming window to `frames` (0: unbounded); before it opens."""
    if not frames:
        return
    status = _set_window(_address(session), frames, 0)  # lwm 0: half the window
    if status:
        raise RuntimeError(f"proton refused an incoming window of {frames} frames ({status})")
