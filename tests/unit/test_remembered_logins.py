"""enmesh-auth's remembered logins against a Keycloak double: when a password grant is
skipped, and every change that sends a login back to one. The same behaviour against a
real Keycloak is in tests/auth/test_keycloak_path.py."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest

from enmesh.auth.frames import AUTH, OK, SYS_TEMP
from enmesh.auth.keycloak import Verdict
from enmesh.auth.lookup import AdminApiError, UserState
from enmesh.auth.verdicts import RememberingCheck


@dataclass
class FakeKeycloak:
    """Password grants and admin-API lookups over one dict of users."""

    passwords: dict[str, str] = field(default_factory=lambda: {"dev@iot": "right"})
    states: dict[str, UserState] = field(
        default_factory=lambda: {
            "dev@iot": UserState("id-1", True, (("cred-1", 100),), ("/iot/send_telemetry",))
        }
    )
    grants: int = 0
    lookups_fail: bool = False

    def check(self, username: str, password: str) -> Verdict:
        self.grants += 1
        state = self.states.get(username)
        if state is None or not state.usable or self.passwords.get(username) != password:
            return Verdict(AUTH, reason="Invalid user credentials")
        return Verdict(OK, username, state.groups)

    def state(self, username: str) -> UserState | None:
        if self.lookups_fail:
            raise AdminApiError("Keycloak admin API answered HTTP 503")
        return self.states.get(username)

    def change(self, username: str, **changes: object) -> None:
        self.states[username] = replace(self.states[username], **changes)  # type: ignore[arg-type]


@pytest.fixture
def keycloak() -> FakeKeycloak:
    return FakeKeycloak()


@pytest.fixture
def check(keycloak: FakeKeycloak) -> RememberingCheck:
    return RememberingCheck(keycloak, keycloak)


def test_a_login_accepted_once_needs_no_second_grant(
    keycloak: FakeKeycloak, check: RememberingCheck
) -> None:
    first = check.check("dev@iot", "right")
    second = check.check("dev@iot", "right")
    assert first.code == second.code == OK
    assert second.identity == "dev@iot"
    assert keycloak.grants == 1


def test_a_wrong_password_always_reaches_keycloak(
    keycloak: FakeKeycloak, check: RememberingCheck
) -> None:
    check.check("dev@iot", "right")
    assert check.check("dev@iot", "wrong").code == AUTH
    assert check.check("dev@iot", "wrong").code == AUTH
    assert keycloak.grants == 3
    assert check.check("dev@iot", "right").code == OK  # the right one is still remembered
    assert keycloak.grants == 3


@pytest.mark.parametrize(
    "change",
    [
        {"usable": False},  # disabled, or a required action
        {"password_stamp": (("cred-2", 200),)},  # password set or reset by an admin
        {"user_id": "id-2"},  # removed and created again under the same name
    ],
)
def test_a_changed_user_goes_back_to_a_grant(
    keycloak: FakeKeycloak, check: RememberingCheck, change: dict[str, object]
) -> None:
    check.check("dev@iot", "right")
    keycloak.change("dev@iot", **change)
    verdict = check.check("dev@iot", "right")
    assert keycloak.grants == 2
    assert verdict.code == (AUTH if change.get("usable") is False else OK)


def test_a_removed_user_is_refused(keycloak: FakeKeycloak, check: RememberingCheck) -> None:
    check.check("dev@iot", "right")
    del keycloak.states["dev@iot"]
    assert check.check("dev@iot", "right").code == AUTH


def test_the_old_password_is_refused_after_a_reset(
    keycloak: FakeKeycloak, check: RememberingCheck
) -> None:
    check.check("dev@iot", "right")
    keycloak.passwords["dev@iot"] = "new"
    keycloak.change("dev@iot", password_stamp=(("cred-2", 200),))
    assert check.check("dev@iot", "right").code == AUTH
    assert check.check("dev@iot", "new").code == OK
    assert check.check("dev@iot", "new").code == OK
    assert keycloak.grants == 3  # the old one refused, the new one granted once


def test_groups_come_from_the_lookup_not_the_remembered_login(
    keycloak: FakeKeycloak, check: RememberingCheck
) -> None:
    check.check("dev@iot", "right")
    keycloak.change("dev@iot", groups=("/iot/recv_commands",))
    verdict = check.check("dev@iot", "right")
    assert verdict.groups == ("/iot/recv_commands",)
    assert keycloak.grants == 1


def test_admin_api_down_means_grants_as_before(keycloak: FakeKeycloak) -> None:
    check = RememberingCheck(keycloak, keycloak)
    check.check("dev@iot", "right")
    keycloak.lookups_fail = True
    assert check.check("dev@iot", "right").code == OK
    assert check.check("dev@iot", "right").code == OK
    assert keycloak.grants == 3


def test_a_login_is_not_remembered_when_the_password_changed_during_its_grant(
    keycloak: FakeKeycloak,
) -> None:
    """The stamp read after the grant would belong to the new password."""

    class ResetDuringGrant(FakeKeycloak):
        def check(self, username: str, password: str) -> Verdict:
            verdict = super().check(username, password)
            self.change(username, password_stamp=(("cred-2", 200),))
            self.passwords[username] = "new"
            return verdict

    racing = ResetDuringGrant()
    check = RememberingCheck(racing, racing)
    assert check.check("dev@iot", "right").code == OK
    assert check.check("dev@iot", "right").code == AUTH  # not taken from memory


def test_remembered_logins_expire(keycloak: FakeKeycloak) -> None:
    check = RememberingCheck(keycloak, keycloak, max_age=0.0)
    check.check("dev@iot", "right")
    check.check("dev@iot", "right")
    assert keycloak.grants == 2


def test_keycloak_unreachable_stays_a_temporary_refusal() -> None:
    class Unreachable(FakeKeycloak):
        def check(self, username: str, password: str) -> Verdict:
            return Verdict(SYS_TEMP, reason="Keycloak at https://kc: refused")

    down = Unreachable()
    down.lookups_fail = True
    assert RememberingCheck(down, down).check("dev@iot", "right").code == SYS_TEMP


def test_the_oldest_entries_go_first_past_the_limit(keycloak: FakeKeycloak) -> None:
    for n in range(3):
        keycloak.passwords[f"u{n}@iot"] = "pw"
        keycloak.states[f"u{n}@iot"] = UserState(f"id-u{n}", True, (("c", 1),), ())
    check = RememberingCheck(keycloak, keycloak, max_entries=2)
    for n in range(3):
        check.check(f"u{n}@iot", "pw")
    grants = keycloak.grants
    check.check("u2@iot", "pw")
    check.check("u1@iot", "pw")
    assert keycloak.grants == grants
    check.check("u0@iot", "pw")
    assert keycloak.grants == grants + 1
