"""enmesh-auth's SCRAM-SHA-256 exchange (enmesh.auth.scram) against scramp's client, with
the keys a Keycloak answer would carry."""

from __future__ import annotations

import pytest
from scramp import ScramClient, ScramMechanism  # type: ignore[import-untyped]

from enmesh.auth.frames import AUTH, OK, SYS_TEMP
from enmesh.auth.lookup import AdminApiError, ScramRecord
from enmesh.auth.scram import MECHANISM, ScramExchange, ScramRefusedError

GROUPS = ("/shop", "/shop/send_orders")


def record(username: str, password: str, **changes: object) -> ScramRecord:
    salt, stored, server, iterations = ScramMechanism(MECHANISM).make_auth_info(
        password, iteration_count=4096
    )
    fields: dict[str, object] = {
        "username": username,
        "usable": True,
        "groups": GROUPS,
        "salt": salt,
        "iterations": iterations,
        "stored_key": stored,
        "server_key": server,
        **changes,
    }
    return ScramRecord(**fields)  # type: ignore[arg-type]


class Source:
    def __init__(self, *records: ScramRecord, down: bool = False) -> None:
        self.records = {r.username: r for r in records}
        self.down = down
        self.failures: list[str] = []

    def scram_keys(self, username: str) -> ScramRecord | None:
        if self.down:
            raise AdminApiError("Keycloak at https://127.0.0.1:1: connection refused")
        return self.records.get(username)

    def report_failure(self, username: str) -> None:
        self.failures.append(username)


def login(source: Source, username: str, password: str) -> tuple[int, str, ScramClient]:
    client = ScramClient([MECHANISM], username, password)
    exchange = ScramExchange(source, b"k" * 32)
    server_first = exchange.first(client.get_client_first())
    client.set_server_first(server_first)
    verdict, server_final = exchange.final(client.get_client_final())
    if verdict.code == OK:
        client.set_server_final(server_final)  # raises if the server's signature is wrong
    return verdict.code, verdict.reason or verdict.identity, client


def test_the_right_password_logs_in_with_the_users_groups() -> None:
    source = Source(record("alice@shop", "alice-secret"))
    client = ScramClient([MECHANISM], "alice@shop", "alice-secret")
    exchange = ScramExchange(source, b"k" * 32)
    client.set_server_first(exchange.first(client.get_client_first()))
    verdict, server_final = exchange.final(client.get_client_final())
    assert (verdict.code, verdict.identity, verdict.groups) == (OK, "alice@shop", GROUPS)
    client.set_server_final(server_final)  # the client checks the server knew the keys
    assert not source.failures


def test_a_wrong_password_is_refused_and_reported_to_keycloak() -> None:
    source = Source(record("alice@shop", "alice-secret"))
    code, reason, _ = login(source, "alice@shop", "not-hers")
    assert code == AUTH and "client keys don't match" in reason
    assert source.failures == ["alice@shop"]


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"usable": False}, "disabled"),
        ({"unavailable": "the password is hashed with argon2"}, "argon2"),
    ],
)
def test_a_user_who_may_not_log_in_fails_at_the_proof_like_a_wrong_password(
    changes: dict[str, object], why: str
) -> None:
    source = Source(record("alice@shop", "alice-secret", **changes))
    code, reason, _ = login(source, "alice@shop", "alice-secret")
    assert code == AUTH and why in reason
    assert not source.failures  # not a guess at the password


def test_an_unknown_user_gets_a_decoy_challenge_not_an_answer() -> None:
    """The server-first of a user Keycloak lacks looks like a real one (salt, the realm's
    iteration count), and stays the same for that name; the refusal comes at the proof."""
    source = Source()

    def server_first(username: str) -> str:
        client = ScramClient([MECHANISM], username, "guess")
        return ScramExchange(source, b"k" * 32).first(client.get_client_first())

    first = server_first("nobody@shop")
    assert ",s=" in first and ",i=27500" in first
    salt = first.split(",s=")[1].split(",")[0]
    assert salt == server_first("nobody@shop").split(",s=")[1].split(",")[0]
    assert salt != server_first("someone@shop").split(",s=")[1].split(",")[0]
    code, reason, _ = login(source, "nobody@shop", "guess")
    assert (code, reason) == (AUTH, "no such user")


def test_keycloak_unreachable_is_a_temporary_failure_before_any_challenge() -> None:
    client = ScramClient([MECHANISM], "alice@shop", "alice-secret")
    with pytest.raises(ScramRefusedError) as refused:
        ScramExchange(Source(down=True), b"k" * 32).first(client.get_client_first())
    assert refused.value.verdict.code == SYS_TEMP
    assert "connection refused" in refused.value.verdict.reason


@pytest.mark.parametrize(
    ("client_first", "why"),
    [
        ("n,a=bob@shop,n=alice@shop,r=abcdefghijklmnop", "authzid must be empty"),
        ("p=tls-unique,,n=alice@shop,r=abcdefghijklmnop", "channel binding"),
        ("garbage", "malformed"),
    ],
)
def test_a_bad_client_first_is_refused(client_first: str, why: str) -> None:
    source = Source(record("alice@shop", "alice-secret"))
    with pytest.raises(ScramRefusedError) as refused:
        ScramExchange(source, b"k" * 32).first(client_first)
    assert refused.value.verdict.code == AUTH
    assert why in refused.value.verdict.reason
