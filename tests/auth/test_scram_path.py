"""SCRAM-SHA-256 through enmesh-router's authServicePlugin and enmesh-auth, against a real
Keycloak whose enmesh provider (enmesh/deploy/keycloak_scram) serves the users' keys; and
the Kubernetes program's Keycloak steps run here against it (the provider's build in
init containers, the realm sync Job's command)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import ssl
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

import pytest
from proton import ConnectionException
from proton.utils import BlockingConnection

from enmesh.auth.admin import KeycloakAdmin
from enmesh.auth.keycloak import KeycloakSettings
from enmesh.auth.lookup import LOOKUP_CLIENT, UserLookup
from enmesh.auth.realm import HASH_ITERATIONS, PASSWORD_POLICY, realm_json
from enmesh.auth.sync import sync_realm
from enmesh.deploy import keycloak_dist
from enmesh.deploy.keycloak_provider import PROVIDER_JAR
from enmesh.k8s.schema import pod_spec
from enmesh.model import Model, load_model
from tests.auth.conftest import (
    LOOKUP_SECRET,
    MODEL,
    PASSWORDS,
    AuthStack,
    check_shop_rights,
    connect,
    may,
    new_user,
    shop_sender,
    tls_options,
)
from tests.pulumi.conftest import capture_of
from tests.support.keycloak import Keycloak
from tests.support.mesh import wait_until

SCRAM = "SCRAM-SHA-256"
ENMESH = Path(sys.executable).parent / "enmesh"


def scram(stack: AuthStack, user: str, password: str, port: int = 0) -> Any:
    """A client of the router's amqps listener (or `port`, cleartext) with SCRAM alone."""
    if port:
        url = f"amqp://127.0.0.1:{port}"
        options: dict[str, Any] = {"timeout": 20, "virtual_host": "shop"}
    else:
        url, options = f"amqps://127.0.0.1:{stack.tls_port}", tls_options(stack.pki.ca_cert, "shop")
    return BlockingConnection(
        url, user=user, password=password, **{**options, "allowed_mechs": SCRAM}
    )


def refused(stack: AuthStack, user: str, password: str) -> str:
    with pytest.raises(ConnectionException) as refusal:
        scram(stack, user, password).close()
    return str(refusal.value)


def test_scram_over_tls_with_keycloaks_passwords_and_groups(stack: AuthStack) -> None:
    check_shop_rights(lambda user, password: scram(stack, user, password))
    assert "unauthorized" in refused(stack, "alice@shop", "not-her-password")
    assert "unauthorized" in refused(stack, "nobody@shop", "whatever")
    log = stack.auth_log.read_text()
    assert "refused 'nobody@shop': no such user" in log
    assert "alice-secret" not in log and "not-her-password" not in log


def test_a_listener_limited_to_scram_serves_scram(stack: AuthStack) -> None:
    """saslMechanisms: SCRAM-SHA-256 on a cleartext listener: SCRAM sends no password, so
    it may go without TLS; PLAIN is not offered there."""
    scram(stack, "alice@shop", "alice-secret", port=stack.scram_only_port).close()
    with pytest.raises(ConnectionException):
        connect(stack, "alice@shop", "alice-secret", "shop", stack.scram_only_port).close()


def test_scram_follows_keycloak_user_changes(stack: AuthStack) -> None:
    keycloak = stack.keycloak
    path = f"/enmesh/users/{new_user(stack, 'ivan@shop', 'ivan-secret', 'send_orders')['id']}"
    first = scram(stack, "ivan@shop", "ivan-secret")  # no router change, no enmesh-auth restart
    assert may(first, "orders", receive=False)
    assert not may(first, "orders", receive=True)

    new = {"type": "password", "value": "ivan-new", "temporary": False}
    keycloak.admin("PUT", f"{path}/reset-password", new)
    assert "unauthorized" in refused(stack, "ivan@shop", "ivan-secret")
    scram(stack, "ivan@shop", "ivan-new").close()

    keycloak.admin("PUT", path, {**keycloak.admin("GET", path), "enabled": False})
    assert "unauthorized" in refused(stack, "ivan@shop", "ivan-new")
    assert may(first, "orders", receive=False)  # the open connection carries on
    first.close()
    keycloak.admin("DELETE", path)
    assert "unauthorized" in refused(stack, "ivan@shop", "ivan-new")


def _keys(stack: AuthStack, user: str, token: str | None) -> tuple[int, dict[str, Any]]:
    query = urllib.parse.urlencode({"username": user})
    url = f"{stack.keycloak.url}/realms/enmesh/enmesh-scram/keys?{query}"
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    context = ssl.create_default_context(cafile=str(stack.pki.ca_cert))
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, headers=headers), context=context
        ) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as error:
        return error.code, {}


def _token(stack: AuthStack, form: dict[str, str]) -> str:
    context = ssl.create_default_context(cafile=str(stack.pki.ca_cert))
    request = urllib.request.Request(
        f"{stack.keycloak.url}/realms/enmesh/protocol/openid-connect/token",
        data=urllib.parse.urlencode(form).encode(),
    )
    with urllib.request.urlopen(request, context=context) as answer:
        return str(json.load(answer)["access_token"])


def test_only_enmesh_auths_account_reads_scram_keys_and_never_a_hash(stack: AuthStack) -> None:
    assert _keys(stack, "alice@shop", None)[0] == 401
    alices = _token(
        stack,
        {
            "grant_type": "password",
            "client_id": "enmesh-auth",
            "username": "alice@shop",
            "password": "alice-secret",
        },
    )
    assert _keys(stack, "alice@shop", alices)[0] == 403  # a user's own token: no
    other = {"clientId": "other-service", "secret": "other-secret", "publicClient": False,
             "serviceAccountsEnabled": True, "standardFlowEnabled": False}  # fmt: skip
    stack.keycloak.admin("POST", "/enmesh/clients", other)
    another = _token(
        stack,
        {"grant_type": "client_credentials", "client_id": "other-service",
         "client_secret": "other-secret"},
    )  # fmt: skip
    assert _keys(stack, "alice@shop", another)[0] == 403  # another service account: no

    lookup = _token(
        stack,
        {
            "grant_type": "client_credentials",
            "client_id": LOOKUP_CLIENT,
            "client_secret": LOOKUP_SECRET,
        },
    )
    status, answer = _keys(stack, "alice@shop", lookup)
    assert status == 200
    keys = answer["scram"]
    assert set(keys) == {"credential", "iterations", "salt", "serverKey", "storedKey"}
    assert keys["iterations"] == HASH_ITERATIONS  # the realm's policy
    # The keys are SCRAM's for alice's password (RFC 5802: StoredKey = H(HMAC(SaltedPassword,
    # "Client Key"))), computed here from the password alone.
    salted = hashlib.pbkdf2_hmac(
        "sha256", b"alice-secret", base64.b64decode(keys["salt"]), keys["iterations"]
    )
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    assert base64.b64decode(keys["storedKey"]) == hashlib.sha256(client_key).digest()
    assert answer["groups"] == [
        "/enmesh-managed",
        "/shop",
        "/shop/recv_orders",
        "/shop/send_orders",
    ]
    assert _keys(stack, "nobody@shop", lookup)[0] == 404
    assert _keys(stack, "../a/b", lookup)[0] == 404  # a name, never a path


def test_wrong_scram_proofs_count_towards_keycloaks_lockout(stack: AuthStack) -> None:
    """With the realm's brute-force detection on (Keycloak's default is off): a right
    proof clears the failures before it, as a login form's does; three wrong ones in a row
    lock the user out, and then the right password is refused too."""
    keycloak = stack.keycloak
    new_user(stack, "judy@shop", "judy-secret", "send_orders")
    lockout = {"bruteForceProtected": True, "failureFactor": 3, "waitIncrementSeconds": 300,
               "maxFailureWaitSeconds": 300, "quickLoginCheckMilliSeconds": 1}  # fmt: skip
    keycloak.admin("PUT", "/enmesh", lockout)
    try:
        for _ in range(2):
            assert "unauthorized" in refused(stack, "judy@shop", "a-guess")
        wait_until(  # the reports travel in the background
            lambda: _failures(stack, "judy@shop") == 2, 20, "Keycloak to count two failures"
        )
        scram(stack, "judy@shop", "judy-secret").close()  # reported: the count starts again
        for _ in range(2):
            assert "unauthorized" in refused(stack, "judy@shop", "a-guess")
        wait_until(lambda: _failures(stack, "judy@shop") == 2, 20, "Keycloak to count two failures")
        scram(stack, "judy@shop", "judy-secret").close()  # 2 failures since the success
        for _ in range(3):
            assert "unauthorized" in refused(stack, "judy@shop", "a-guess")
        wait_until(
            lambda: "unauthorized" in refused(stack, "judy@shop", "judy-secret"),
            20,
            "Keycloak to lock judy out",
        )
        assert "refused 'judy@shop': user disabled, locked out" in stack.auth_log.read_text()
    finally:
        keycloak.admin("PUT", "/enmesh", {"bruteForceProtected": False})


def _failures(stack: AuthStack, username: str) -> int:
    """Keycloak's count of a user's login failures (its attack-detection API)."""
    (user,) = stack.keycloak.admin("GET", f"/enmesh/users?exact=true&username={username}")
    return int(
        stack.keycloak.admin("GET", f"/enmesh/attack-detection/brute-force/users/{user['id']}")[
            "numFailures"
        ]
    )


def test_a_realm_from_before_scram_gets_its_policy_and_users_their_keys_at_next_login(
    stack: AuthStack,
) -> None:
    """A realm made without enmesh's password policy hashes with Keycloak's default
    (argon2), which holds no SCRAM key: SCRAM is refused and enmesh-auth's log says why.
    The sync (`enmesh apply`) sets the policy; the user's next PLAIN login has Keycloak
    hash the password again under it, and from then on SCRAM works."""
    keycloak = stack.keycloak
    keycloak.admin("PUT", "/enmesh", {"passwordPolicy": ""})
    new_user(stack, "kate@shop", "kate-secret", "send_orders")  # hashed with argon2
    assert "unauthorized" in refused(stack, "kate@shop", "kate-secret")
    assert "no SCRAM keys: the password is hashed with argon2" in stack.auth_log.read_text()

    admin = KeycloakAdmin(keycloak.url, str(stack.pki.ca_cert), "admin", keycloak.admin_password)
    synced = sync_realm(admin, load_model([MODEL]), PASSWORDS)
    assert "realm password policy" in synced.changed
    assert keycloak.admin("GET", "/enmesh")["passwordPolicy"] == PASSWORD_POLICY
    assert "unauthorized" in refused(stack, "kate@shop", "kate-secret")  # not hashed again yet

    connect(stack, "kate@shop", "kate-secret", "shop").close()
    scram(stack, "kate@shop", "kate-secret").close()


def test_the_providers_answer_gives_the_admin_apis_user_state(stack: AuthStack) -> None:
    """A remembered login is checked with one request to enmesh's provider where Keycloak
    has it, else with three to the admin API: both read the same state, and a password
    reset changes both stamps."""
    settings = KeycloakSettings(stack.keycloak.url, "enmesh", "enmesh-auth", None,
                                str(stack.pki.ca_cert))  # fmt: skip
    provider = UserLookup(settings, LOOKUP_CLIENT, LOOKUP_SECRET, provider=True)
    admin_api = UserLookup(settings, LOOKUP_CLIENT, LOOKUP_SECRET, provider=False)
    ivan = new_user(stack, "ivan@shop", "ivan-secret", "send_orders", "recv_orders")
    before = provider.state("ivan@shop")
    assert before is not None and before == admin_api.state("ivan@shop")
    assert before.usable and before.password_stamp
    assert before.groups == ("/shop/recv_orders", "/shop/send_orders")

    new_password = {"type": "password", "value": "ivan-new", "temporary": False}
    stack.keycloak.admin("PUT", f"/enmesh/users/{ivan['id']}/reset-password", new_password)
    after = provider.state("ivan@shop")
    assert after == admin_api.state("ivan@shop")
    assert after is not None and after.password_stamp != before.password_stamp
    assert provider.state("nobody@shop") is None and admin_api.state("nobody@shop") is None


def _named(objects: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(o for o in objects if o["metadata"]["name"] == name)


def test_the_kubernetes_init_containers_build_the_provider_keycloak_loads(
    keycloak: Keycloak, tmp_path: Path
) -> None:
    """The init containers' two steps on this machine, against the distribution this module's
    Keycloak runs: the sources laid out as a ConfigMap volume presents them (every entry a
    link into `..data`), Keycloak's jars copied as the first container does, the recipe in
    a JDK. The jar holds the provider's classes and its service entry, byte for byte the
    classes of the jar built into the running (SCRAM-serving) Keycloak."""
    pod = capture_of("local")
    spec = pod_spec(
        next(o for o in pod.kind("Deployment") if o["metadata"]["name"] == "local-keycloak")
    )
    assert spec is not None
    copy, build = spec["initContainers"]
    config_map = next(
        o for o in pod.kind("ConfigMap") if o["metadata"]["name"] == "local-keycloak-provider"
    )
    volume = next(v for v in spec["volumes"] if v["name"] == "provider-src")
    src = tmp_path / "provider" / "src"
    data = src / "..2026_11_27"
    for item in volume["configMap"]["items"]:
        target = data / item["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(config_map["data"][item["key"]])
    (src / "..data").symlink_to(data.name)
    for top in sorted({Path(i["path"]).parts[0] for i in volume["configMap"]["items"]}):
        (src / top).symlink_to(Path("..data") / top)
    rooted = {
        "/opt/keycloak/lib/lib/main": str(keycloak.home / "lib" / "lib" / "main"),
        "/provider/": f"{tmp_path}/provider/",
        "/tmp": str(tmp_path / "work"),
    }

    def here(command: str) -> str:  # one pass: a local path may hold a pod's path
        pattern = "|".join(re.escape(p) for p in sorted(rooted, key=len, reverse=True))
        return re.sub(pattern, lambda found: rooted[found[0]], command)

    for directory in ("lib", "out"):
        (tmp_path / "provider" / directory).mkdir()
    (tmp_path / "work").mkdir()
    env = {**os.environ, "PATH": f"{keycloak_dist.java_home()}/bin:{os.environ['PATH']}"}
    for container in (copy, build):
        shell, flag, script = container["command"]
        subprocess.run([shell, flag, here(script)], env=env, check=True)
    built = zipfile.ZipFile(tmp_path / "provider" / "out" / PROVIDER_JAR)
    running = zipfile.ZipFile(keycloak.home / "providers" / PROVIDER_JAR)
    classes = sorted(n for n in running.namelist() if n.endswith(".class"))
    assert classes and sorted(n for n in built.namelist() if n.endswith(".class")) == classes
    service = "META-INF/services/org.keycloak.services.resource.RealmResourceProviderFactory"
    assert built.read(service) == running.read(service)
    assert all(built.read(n) == running.read(n) for n in classes)


def test_the_kubernetes_realm_sync_step_brings_a_changed_realm_to_keycloak(
    stack: AuthStack, tmp_path: Path
) -> None:
    """What the realm sync Job runs (`enmesh deploy keycloak-realm`, the realm Secret's
    export): a user added to the export is created with its groups and can log in; the
    export without it removes it; a hand-made user stays; a wrong admin password is an
    error that changes nothing."""
    keycloak = stack.keycloak
    new_user(stack, "kim@shop", "kim-secret", "recv_orders")  # by hand, in Keycloak
    model_file = tmp_path / "keycloak.model.yml"
    model_file.write_text(MODEL.read_text() + shop_sender("lena"))
    passwords = {**PASSWORDS, "shop-lena": "lena-secret"}
    realm_file = tmp_path / "enmesh-realm.json"

    def run(model: Model, admin_password: str) -> subprocess.CompletedProcess[str]:
        realm_file.write_text(realm_json(model, passwords, LOOKUP_SECRET))
        command = [str(ENMESH), "deploy", "keycloak-realm", f"--realm-file={realm_file}"]
        command += [f"--url={keycloak.url}", f"--ca={stack.pki.ca_cert}"]
        env = {**os.environ, "KEYCLOAK_ADMIN_PASSWORD": admin_password}
        return subprocess.run(command, env=env, capture_output=True, text=True, check=False)

    wrong_admin = run(load_model([model_file]), "not-the-admin-password")
    assert wrong_admin.returncode == 1 and wrong_admin.stdout.startswith("error: ")
    added = run(load_model([model_file]), keycloak.admin_password)
    assert added.returncode == 0, added.stdout
    assert "created: /shop/send_audit, lena@shop" in added.stdout
    lena = scram(stack, "lena@shop", "lena-secret")
    try:
        assert may(lena, "audit", receive=False)
    finally:
        lena.close()
    removed = run(load_model([MODEL]), keycloak.admin_password)
    assert "removed: /shop/send_audit, lena@shop" in removed.stdout
    assert "unauthorized" in refused(stack, "lena@shop", "lena-secret")
    kim = connect(stack, "kim@shop", "kim-secret", "shop")
    kim.close()
