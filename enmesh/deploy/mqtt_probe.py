"""Is an MQTT gateway listener serving MQTT? (`enmesh status`)

The probe speaks MQTT 3.1.1 without credentials: a CONNECT with no user name. A live
gateway answers it itself with CONNACK 4 (bad user name or password) without opening a
connection to the mesh, so the probe costs the routers nothing and never counts as a
failed login in their throttle. Any other answer, or none, is a gateway that does not
serve devices. `mqtts://` does the same inside TLS, checked against the stack's CA;
`ws://`/`wss://` are checked for a listening socket only.
"""

from __future__ import annotations

import socket
import ssl
from pathlib import Path
from urllib.parse import urlsplit

from enmesh.mqtt import packets

TIMEOUT = 5.0
CONNACK = 0x20
BAD_CREDENTIALS_311 = 4  # MQTT 3.1.1's CONNACK return code for a refused login
CLIENT_ID = "enmesh-status"


def connect_without_credentials() -> bytes:
    """MQTT 3.1.1 CONNECT: clean session, keep-alive 0, no user name or password."""
    variable = packets.string("MQTT") + bytes([4, 0x02]) + (0).to_bytes(2, "big")
    return packets.frame(packets.CONNECT, 0, variable + packets.string(CLIENT_ID))


def probe(url: str, ca: Path | None) -> tuple[bool, str]:
    """(serving?, what was seen) for one listener URL such as mqtts://127.0.0.1:8883."""
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port or 0
    try:
        with socket.create_connection((host, port), timeout=TIMEOUT) as raw:
            if parts.scheme in ("ws", "wss"):
                return True, "listening"
            if parts.scheme == "mqtts":
                context = ssl.create_default_context(cafile=str(ca) if ca else None)
                with context.wrap_socket(raw, server_hostname=host) as tls:
                    return _answer(tls)
            return _answer(raw)
    except ssl.SSLError as error:
        return False, f"TLS failed: {error.reason or error}"
    except OSError as error:
        return False, f"unreachable: {error}"


def _answer(sock: socket.socket) -> tuple[bool, str]:
    sock.sendall(connect_without_credentials())
    reply = _read(sock, 4)
    if len(reply) == 4 and reply[0] == CONNACK and reply[3] == BAD_CREDENTIALS_311:
        return True, "answers MQTT (CONNACK)"
    return False, f"no CONNACK: got {reply.hex() or 'nothing'}"


def _read(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data
