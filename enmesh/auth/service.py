"""enmesh-auth: the authentication service of qdrouterd's `authServicePlugin` protocol.

A router relays a client's SASL exchange here over AMQP (qpid-dispatch src/remote_sasl.c):
SASL header, our sasl-mechanisms, the client's sasl-init (and any responses), our
sasl-outcome. On success the router opens the AMQP connection, asking for the
`ADDRESS-AUTHZ` capability, and our open frame's properties answer with
`authenticated-identity` ({"sub": ..., "preferred_username": ...}) and `address-authz`
(address pattern -> array of "send"/"recv"). The router then closes this connection.

Mechanisms: PLAIN (the password checked by Keycloak, enmesh.auth.keycloak) and, with the
service account that reads users' keys, SCRAM-SHA-256 (enmesh.auth.scram): its
challenge and response pass through the router, and the server-final message rides in the
outcome's additional-data. Run it with TLS, as PLAIN carries the password.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections import deque
from dataclasses import dataclass

from proton import symbol, ubyte, uint

from enmesh.auth import frames
from enmesh.auth.authz import address_authz
from enmesh.auth.frames import Frame, FrameError, FrameReader
from enmesh.auth.keycloak import Verdict
from enmesh.auth.scram import MECHANISM as SCRAM
from enmesh.auth.scram import ScramExchange, ScramRefusedError, ScramSource
from enmesh.auth.verdicts import Check

log = logging.getLogger("enmesh.auth")
PLAIN = "PLAIN"
EXCHANGE_TIMEOUT_SECONDS = 30.0
CONTAINER_ID = "enmesh-auth"


class ExchangeError(Exception):
    """The peer did not follow the exchange; the connection is dropped."""


@dataclass(frozen=True)
class Plain:
    authzid: str
    username: str
    password: str


def parse_plain(response: bytes) -> Plain:
    """RFC 4616: [authzid] NUL authcid NUL passwd, UTF-8."""
    parts = response.split(b"\x00")
    if len(parts) != 3 or not parts[1]:
        raise ExchangeError("malformed PLAIN response")
    try:
        authzid, username, password = (p.decode("utf-8") for p in parts)
    except UnicodeDecodeError as exc:
        raise ExchangeError("PLAIN response is not UTF-8") from exc
    return Plain(authzid, username, password)


class _Peer:
    """Frames and headers from one connection, one at a time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self._frames = FrameReader()
        self._items: deque[bytes | Frame] = deque()

    async def next(self) -> bytes | Frame:
        while not self._items:
            data = await self.reader.read(4096)
            if not data:
                raise ExchangeError("peer closed the connection")
            try:
                self._items.extend(self._frames.feed(data))
            except FrameError as exc:
                raise ExchangeError(str(exc)) from exc
        return self._items.popleft()

    async def expect(self, header: bytes | None = None, code: int | None = None) -> Frame:
        item = await self.next()
        if header is not None:
            if item != header:
                raise ExchangeError(f"expected protocol header {header!r}, got {item!r}")
            return Frame(frames.SASL_FRAME, 0)
        if not isinstance(item, Frame) or item.code != code:
            raise ExchangeError(f"expected performative 0x{code:02x}, got {item!r}")
        return item

    def send(self, data: bytes) -> None:
        self.writer.write(data)


class AuthService:
    def __init__(
        self, check: Check, scram: ScramSource | None = None, decoy_key: bytes = b""
    ) -> None:
        """`scram`: where users' SCRAM keys come from (SCRAM-SHA-256 is offered with it);
        `decoy_key`: what decoy challenges are derived under (enmesh.auth.scram)."""
        self.check, self.scram = check, scram
        self.mechanisms = (SCRAM, PLAIN) if scram else (PLAIN,)
        self._decoy_key = decoy_key

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = _Peer(reader, writer)
        name = writer.get_extra_info("peername")
        try:
            await asyncio.wait_for(self._exchange(peer), EXCHANGE_TIMEOUT_SECONDS)
        except (ExchangeError, TimeoutError, ConnectionError) as exc:
            log.info("connection %s: %s", name, exc or "timed out")
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, ssl.SSLError):
                await writer.wait_closed()

    async def _exchange(self, peer: _Peer) -> None:
        await peer.expect(header=frames.SASL_HEADER)
        mechanisms = frames.symbols(*self.mechanisms)
        peer.send(frames.SASL_HEADER + _sasl(frames.SASL_MECHANISMS, [mechanisms]))
        init = await peer.expect(code=frames.SASL_INIT)
        mechanism = str(init.field(0, ""))
        if mechanism not in self.mechanisms:
            verdict = _logged(
                Verdict(frames.AUTH, reason=f"mechanism {mechanism!r} not offered"), ""
            )
            additional = b""
        elif mechanism == SCRAM:
            verdict, additional = await self._scram(peer, init)
        else:
            verdict, additional = await self._verify(init), b""
        outcome: list[object] = [ubyte(verdict.code)] + ([additional] if additional else [])
        peer.send(_sasl(frames.SASL_OUTCOME, outcome))
        await peer.writer.drain()
        if verdict.code != frames.OK:
            return
        await peer.expect(header=frames.AMQP_HEADER)
        peer.send(frames.AMQP_HEADER)
        await peer.expect(code=frames.OPEN)
        peer.send(_open(verdict))
        await peer.writer.drain()
        with contextlib.suppress(ExchangeError):
            await peer.expect(code=frames.CLOSE)  # the router closes as soon as it has read ours
            peer.send(frames.encode(frames.AMQP_FRAME, frames.CLOSE, []))
            await peer.writer.drain()

    async def _scram(self, peer: _Peer, init: Frame) -> tuple[Verdict, bytes]:
        """client-first in the init, our challenge, the client's final in a response; the
        server-final goes back in the outcome."""
        assert self.scram is not None
        exchange = ScramExchange(self.scram, self._decoy_key)
        try:
            server_first = await asyncio.to_thread(exchange.first, _text(init.field(1)))
        except ScramRefusedError as refused:
            return _logged(refused.verdict, exchange.username), b""
        peer.send(_sasl(frames.SASL_CHALLENGE, [server_first.encode()]))
        response = await peer.expect(code=frames.SASL_RESPONSE)
        verdict, server_final = await asyncio.to_thread(exchange.final, _text(response.field(0)))
        return _logged(verdict, exchange.username), server_final.encode()

    async def _verify(self, init: Frame) -> Verdict:
        response = init.field(1) or b""
        plain = parse_plain(bytes(response))
        if plain.authzid and plain.authzid != plain.username:
            return _logged(Verdict(frames.AUTH, reason="authzid differs"), plain.username)
        verdict = await asyncio.to_thread(self.check.check, plain.username, plain.password)
        return _logged(verdict, plain.username)


def _text(value: object) -> str:
    if not isinstance(value, bytes | str):
        raise ExchangeError("SCRAM message missing")
    try:
        return value if isinstance(value, str) else value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ExchangeError("SCRAM message is not UTF-8") from exc


def _logged(verdict: Verdict, username: str) -> Verdict:
    if verdict.code == frames.OK:
        log.info("authenticated %s", verdict.identity)
    else:
        log.warning("refused %r: %s", username, verdict.reason)
    return verdict


def _sasl(code: int, fields: list[object]) -> bytes:
    return frames.encode(frames.SASL_FRAME, code, fields)


def _open(verdict: Verdict) -> bytes:
    identity = {"sub": verdict.identity, "preferred_username": verdict.identity}
    authz = {
        address: frames.strings(*operations)
        for address, operations in address_authz(verdict.identity, verdict.groups).items()
    }
    properties = {symbol("authenticated-identity"): identity, symbol("address-authz"): authz}
    offered = frames.symbols("ADDRESS-AUTHZ")
    fields = [CONTAINER_ID, None, uint(frames.MAX_FRAME), None, None, None, None, offered]
    return frames.encode(frames.AMQP_FRAME, frames.OPEN, [*fields, None, properties])
