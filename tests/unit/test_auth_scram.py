"""enmesh-auth's SCRAM-SHA-256 exchange (enmesh.auth.scram) against scramp's client, with
the keys a Keycloak answer would carry."""

from __future__ import annotations

import pytest
from scramp import ScramClient, ScramMechanism  # type: ignore[import-untyped]

from enmesh.auth.frames import AUTH, OK, SYS_TEMP
from enmesh.auth.lookup import AdminApiError, ScramRecord
from enmesh.auth.realm import PASSWORD_POLICY, with_scram_hashing
from enmesh.auth.scram import MECHANISM, ScramExchange, ScramRefusedError, decoy_key

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
        self.successes: list[str] = []

    def scram_keys(self, username: str) -> ScramRecord | None:
        if self.down:
            raise AdminApiError("Keycloak at https://127.0.0.1:1: connection refused")
        return self.records.get(username)

    def report(self, username: str, success: bool) -> None:
        (self.successes if success else self.failures).append(username)


def exchange(source: Source) -> ScramExchange:
    """Reports run at once here, so that the test sees them (a thread of their own in
    enmesh-auth)."""
    return ScramExchange(source, b"k" * 32, run=lambda report: report())


def server_first(source: Source, username: str) -> str:
    client = ScramClient([MECHANISM], username, "a guess")
    return exchange(source).first(client.get_client_first())


def salt_of(first: str) -> str:
    return first.split(",s=")[1].split(",", maxsplit=1)[0]


def login(source: Source, username: str, password: str) -> tuple[int, str]:
    client = ScramClient([MECHANISM], username, password)
    one = exchange(source)
    client.set_server_first(one.first(client.get_client_first()))
    verdict, server_final = one.final(client.get_client_final())
    if verdict.code == OK:
        client.set_server_final(server_final)  # raises if the server's signature is wrong
    return verdict.code, verdict.reason or verdict.identity


def test_the_right_password_logs_in_with_the_users_groups() -> None:
    source = Source(record("alice@shop", "alice-secret"))
    client = ScramClient([MECHANISM], "alice@shop", "alice-secret")
    one = exchange(source)
    client.set_server_first(one.first(client.get_client_first()))
    verdict, server_final = one.final(client.get_client_final())
    assert (verdict.code, verdict.identity, verdict.groups) == (OK, "alice@shop", GROUPS)
    client.set_server_final(server_final)  # the client checks the server knew the keys
    assert (source.successes, source.failures) == ([], [])  # no failures for it to clear


def test_a_right_proof_is_reported_only_while_keycloak_counts_failures() -> None:
    """A success only clears Keycloak's count of failures: with none, it costs no request."""
    counted = Source(record("alice@shop", "alice-secret", failures=2))
    assert login(counted, "alice@shop", "alice-secret")[0] == OK
    assert (counted.successes, counted.failures) == (["alice@shop"], [])


def test_a_wrong_password_is_refused_and_reported_to_keycloak() -> None:
    source = Source(record("alice@shop", "alice-secret"))
    code, reason = login(source, "alice@shop", "not-hers")
    assert code == AUTH and "client keys don't match" in reason
    assert (source.successes, source.failures) == ([], ["alice@shop"])


def test_a_user_who_may_not_log_in_gets_its_own_challenge_and_is_refused_after() -> None:
    """Disabled or locked out: the challenge is the user's real one (locking a user out
    changes nothing a client sees), the right password is refused all the same, and a
    wrong one still counts as a failure."""
    alice = record("alice@shop", "alice-secret")
    usable, locked = Source(alice), Source(record("alice@shop", "x", **{
        "usable": False, "salt": alice.salt, "stored_key": alice.stored_key,
        "server_key": alice.server_key,
    }))  # fmt: skip
    assert salt_of(server_first(locked, "alice@shop")) == salt_of(
        server_first(usable, "alice@shop")
    )
    code, reason = login(locked, "alice@shop", "alice-secret")
    assert code == AUTH and "disabled, locked out" in reason
    assert not locked.successes
    login(locked, "alice@shop", "a-guess")
    assert locked.failures == ["alice@shop"]


def test_a_password_without_scram_keys_fails_at_the_proof_and_counts_nothing() -> None:
    source = Source(record("alice@shop", "alice-secret", unavailable="hashed with argon2"))
    code, reason = login(source, "alice@shop", "alice-secret")
    assert code == AUTH and "argon2" in reason
    assert not source.failures and not source.successes


def test_an_unknown_user_gets_a_decoy_challenge_not_an_answer() -> None:
    """The server-first of a user Keycloak lacks looks like a real one (a salt, the
    realm's iteration count) and stays the same for that name, across restarts too (the
    decoy key comes from a secret, not from the process); the refusal comes at the proof."""
    source = Source()
    first = server_first(source, "nobody@shop")
    assert ",s=" in first and ",i=27500" in first
    assert salt_of(first) == salt_of(server_first(source, "nobody@shop"))
    assert salt_of(first) != salt_of(server_first(source, "someone@shop"))
    assert decoy_key("lookup-secret") == decoy_key("lookup-secret") != decoy_key("other")
    assert login(source, "nobody@shop", "guess") == (AUTH, "no such user")
    assert not source.failures


def test_keycloak_unreachable_is_a_temporary_failure_before_any_challenge() -> None:
    client = ScramClient([MECHANISM], "alice@shop", "alice-secret")
    with pytest.raises(ScramRefusedError) as refused:
        exchange(Source(down=True)).first(client.get_client_first())
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
        exchange(source).first(client_first)
    assert refused.value.verdict.code == AUTH
    assert why in refused.value.verdict.reason


def test_the_sync_replaces_only_the_hashing_terms_of_a_password_policy() -> None:
    assert with_scram_hashing("") == PASSWORD_POLICY
    mixed = "length(12) and hashAlgorithm(argon2) and notUsername(undefined)"
    assert (
        with_scram_hashing(mixed) == f"length(12) and notUsername(undefined) and {PASSWORD_POLICY}"
    )
    assert with_scram_hashing(PASSWORD_POLICY) == PASSWORD_POLICY
