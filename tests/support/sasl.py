"""Cyrus SASL material for routers: a sasldb of `<username>@<realm>` identities and the
`qdrouterd.conf` SASL configuration the compiler renders (auth/sasl2/qdrouterd.conf).

How the realm works (verified by tests/support_selftest/test_support.py against a real
python-qpid-proton server using Cyrus SASL with this sasldb and config):

- `make_sasldb` stores identity `device@iot` with `saslpasswd2 -u iot device`, i.e. user
  `device` in realm `iot` (`sasldblistusers2` shows `device@iot: userPassword`).
- The client sends the whole identity as its SASL username: `device@iot` (for PLAIN it is
  the authcid, for SCRAM-SHA-256 the `n=` attribute). Cyrus splits it at the last `@`
  into user `device` and realm `iot` and looks up that sasldb entry. Sending only
  `device` fails ("user not found: unable to canonify user and get auxprops"): Cyrus
  then uses its default realm (the server host name), not `iot`.
- After authentication the server sees the full identity `device@iot` in
  `transport.user` (`event.connection.transport.user`), for PLAIN and SCRAM-SHA-256
  alike; `transport.sasl().mech` names the mechanism. That is the identity to match
  against the compiled vhost policies' `users:` lists (`device@iot`, not `device`).
- A wrong password fails with amqp:unauthorized-access ("Authentication failed
  [mech=...]" at the client; Cyrus says "StoredKey mismatch" for SCRAM on the server).
- Cyrus' server side is initialised once per process (`sasl_server_init`): the first
  server transport's `config_path`/`config_name` win for the whole process (checked by
  hand: a second server in the same process, configured with another directory, does
  not find its users). A test process can therefore serve only one SASL configuration
  directory, which is why the selftest's server runs in a spawned child process; routers
  run as their own processes and are not affected.
- PLAIN is a plaintext mechanism: a server with `allow_insecure_mechs = False` refuses
  it on a connection without TLS even if offered and the client is willing; the
  compiled `amqps` listener (TLS) offers `SCRAM-SHA-256 PLAIN`, the plain `amqp`
  listener only `SCRAM-SHA-256`.
- Server-side setup per accepted transport, before any byte is processed (e.g. in
  `on_connection_bound`): `sasl = transport.sasl()`, `sasl.config_path(<dir>)`,
  `sasl.config_name("qdrouterd")`, `sasl.allowed_mechs("SCRAM-SHA-256 PLAIN")`,
  `sasl.allow_insecure_mechs = False`; see `_SaslServer` in the selftest.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from enmesh.deploy.sasldb import split_identity, write_sasldb

CONFIG_NAME = "qdrouterd"

__all__ = ["CONFIG_NAME", "make_sasldb", "split_identity"]


def make_sasldb(path: Path, users: dict[str, str]) -> None:
    """Create (or add to) the Cyrus sasldb at `path`; see `enmesh.deploy.sasldb`."""
    write_sasldb(path, users)


def list_sasldb(path: Path) -> list[str]:
    """Entries of a sasldb as `sasldblistusers2` prints them (`user@realm: property`)."""
    result = subprocess.run(
        ["sasldblistusers2", "-f", str(path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return [line.strip() for line in result.stdout.splitlines() if line.strip()]


def write_sasl_config(directory: Path, sasldb: Path, mechs: str) -> Path:
    """Write `<directory>/qdrouterd.conf` for Cyrus (auxprop sasldb); return its path.

    `mechs` is a space-separated mechanism list, e.g. `"SCRAM-SHA-256 PLAIN"`.
    """
    directory.mkdir(parents=True, exist_ok=True)
    conf = directory / f"{CONFIG_NAME}.conf"
    conf.write_text(
        "pwcheck_method: auxprop\n"
        "auxprop_plugin: sasldb\n"
        f"sasldb_path: {sasldb}\n"
        f"mech_list: {' '.join(mechs.split())}\n"
    )
    return conf
