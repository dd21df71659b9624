"""The console on Kubernetes: what the program deploys for it, and the console itself run
from the files the program gives it (`enmesh-console --kubernetes`), in process: reads
work, every change is refused with the reason, and nothing is written."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from enmesh.compile.stack import load_stack, runtime_dir
from enmesh.console import app as console_app
from enmesh.console import main as console_main
from enmesh.k8s.capture import Capture
from enmesh.k8s.config import parse_config, read_stack_file
from enmesh.k8s.schema import hardening_problems, pod_spec, schema_problems
from tests.pulumi.conftest import ROOT, capture_of, run_with

TLS_DIR, CONFIG_DIR = "/etc/enmesh-console-tls", "/etc/enmesh-console"
SOME_CA = "/etc/ssl/certs/ca-certificates.crt"


def _named(capture: Capture, kind: str, name: str) -> list[dict[str, Any]]:
    return [o for o in capture.kind(kind) if o["metadata"]["name"] == name]


def _one(capture: Capture, kind: str, name: str) -> dict[str, Any]:
    found = _named(capture, kind, name)
    assert len(found) == 1, f"{kind} {name}: {len(found)} found"
    return found[0]


def _container(deployment: dict[str, Any]) -> dict[str, Any]:
    spec = pod_spec(deployment)
    assert spec is not None
    (container,) = spec["containers"]
    return dict(container)


def test_the_console_is_a_deployment_behind_an_https_service(stack: str) -> None:
    capture = capture_of(stack)
    name = f"{stack}-console"
    deployment = _one(capture, "Deployment", name)
    assert deployment["spec"]["replicas"] == 1  # sessions live in its memory
    spec = pod_spec(deployment)
    assert spec is not None
    assert spec["securityContext"]["runAsUser"] == 10000  # the enmesh image's user
    assert spec["automountServiceAccountToken"] is False
    container = _container(deployment)
    assert container["image"] == parse_config(read_stack_file(ROOT, stack), stack).toolsImage
    assert container["ports"] == [{"name": "https", "containerPort": 8443}]
    for probe in ("readinessProbe", "livenessProbe"):
        get = container[probe]["httpGet"]
        assert (get["scheme"], get["port"], get["path"]) == ("HTTPS", "https", "/login")
    command = container["command"]
    assert command[:2] == ["enmesh-console", "--kubernetes"]
    assert {
        f"--stack={stack}",
        f"--stacks-dir={CONFIG_DIR}",
        f"--config-dir={CONFIG_DIR}",
        "--host=0.0.0.0",
        "--port=8443",
        f"--cert={TLS_DIR}/console.crt",
        f"--key={TLS_DIR}/console.key",
        "--administrator=admin@enmesh.stack",
    } <= set(command)
    assert not [a for a in command if a.startswith("--prometheus")]  # none configured
    mounts = {m["name"]: (m["mountPath"], m["readOnly"]) for m in container["volumeMounts"]}
    assert mounts == {
        "tls": (TLS_DIR, True),
        "config": (CONFIG_DIR, True),
        "tmp": ("/tmp", False),
    }
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == f"{stack}-console-tls"
    assert volumes["config"]["configMap"]["name"] == name
    assert {"console.crt", "console.key", "ca.crt"} == set(
        _one(capture, "Secret", f"{stack}-console-tls")["stringData"]
    )
    service = _one(capture, "Service", name)
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["ports"] == [
        {"name": "https", "port": 8443, "targetPort": "https", "protocol": "TCP"}
    ]
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert capture.outputs["consoleUrl"] == f"https://{name}.enmesh.svc.cluster.local:8443"


def test_the_console_certificate_is_from_the_stack_ca_for_its_service() -> None:
    capture = capture_of("aws")
    requests = {r.name: r.inputs for r in capture.of_type("tls:index/certRequest:CertRequest")}
    names = set(requests["tls-console"]["dnsNames"])
    assert {"aws-console", "aws-console.enmesh.svc.cluster.local", "localhost"} <= names
    signed = capture.of_type("tls:index/locallySignedCert:LocallySignedCert")
    console = next(r.inputs for r in signed if r.name == "tls-console")
    assert console["caCertPem"] == capture.outputs["caCertificate"]


def test_the_console_reaches_each_router_pod_and_is_reached_on_8443(stack: str) -> None:
    capture = capture_of(stack)
    files = _one(capture, "ConfigMap", f"{stack}-console")["data"]
    deployment = json.loads(files["deploy.json"])
    hpa = _one(capture, "HorizontalPodAutoscaler", f"{stack}-router")
    assert deployment["ca"] == f"{TLS_DIR}/ca.crt"
    mesh = f"{stack}-router-mesh.enmesh.svc.cluster.local"  # the headless Service
    assert [(r["id"], r["host"], r["ports"]["amqps"]) for r in deployment["routers"]] == [
        (f"{stack}-router-{i}", f"{stack}-router-{i}.{mesh}", 5671)
        for i in range(hpa["spec"]["maxReplicas"])
    ]
    # the routers' client certificates name the pods the console connects to
    requests = {r.name: r.inputs for r in capture.of_type("tls:index/certRequest:CertRequest")}
    for router in deployment["routers"]:
        index = router["id"].rsplit("-", 1)[1]
        assert router["host"] in requests[f"tls-router-{index}-client"]["dnsNames"]
    policies = {o["metadata"]["name"]: o["spec"] for o in capture.kind("NetworkPolicy")}
    console = policies[f"{stack}-console"]
    assert console["podSelector"]["matchLabels"]["app.kubernetes.io/name"] == "console"
    assert [p["port"] for rule in console["ingress"] for p in rule["ports"]] == [8443]
    amqps = next(
        rule
        for rule in policies[f"{stack}-router"]["ingress"]
        if {"port": 5671, "protocol": "TCP"} in rule["ports"]
    )
    peers = [p["podSelector"]["matchLabels"] for p in amqps["from"] if "podSelector" in p]
    assert "console" in {p["app.kubernetes.io/name"] for p in peers}


def test_the_console_switch_off_removes_it() -> None:
    capture = run_with("local", console=False)
    assert schema_problems(capture.objects, "1.33") == []
    leftovers = [
        f"{o['kind']} {o['metadata']['name']}"
        for o in capture.objects
        if "console" in o["metadata"]["name"]
        or "console" in json.dumps(o.get("metadata", {}).get("labels", {}))
        or "console" in json.dumps(o.get("spec", {}))
    ]
    assert leftovers == []
    assert "consoleUrl" not in capture.outputs
    assert not [r for r in capture.resources if r.name == "tls-console"]


def test_console_objects_pass_the_schemas_and_the_hardening_rules() -> None:
    capture = run_with("local", consolePrometheus="http://prometheus-operated.monitoring.svc:9090")
    objects = [o for o in capture.objects if "console" in o["metadata"]["name"]]
    assert {o["kind"] for o in objects} == {
        "ConfigMap",
        "Deployment",
        "NetworkPolicy",
        "Secret",
        "Service",
        "ServiceAccount",
    }
    assert schema_problems(objects, "1.33") == []
    assert hardening_problems(objects) == []
    command = _container(_one(capture, "Deployment", "local-console"))["command"]
    assert "--prometheus=http://prometheus-operated.monitoring.svc:9090" in command


def test_with_a_console_url_users_log_in_through_keycloak(tmp_path: Path) -> None:
    """`consoleUrl` (where browsers reach the console) and `dnsNames` (where they reach
    Keycloak): the realm gets the console's client with that callback and the generated
    secret, the pod that secret, and the console what `enmesh-console` builds its Keycloak
    login from, with the issuer Keycloak's tokens carry."""
    capture = run_with(
        "local", consoleUrl="https://localhost:8443", dnsNames=["messaging.example.com"]
    )
    realm = json.loads(
        _one(capture, "Secret", "local-keycloak-realm")["stringData"]["enmesh-realm.json"]
    )
    (client,) = [c for c in realm["clients"] if c["clientId"] == "enmesh-console"]
    assert client["redirectUris"] == ["https://localhost:8443/login/keycloak/callback"]
    secret = _one(capture, "Secret", "enmesh-console-oidc")["stringData"]["password"]
    assert client["secret"] == secret and secret in capture.secrets
    deployment = _one(capture, "Deployment", "local-console")
    assert "--public-url=https://localhost:8443" in _container(deployment)["command"]
    spec = pod_spec(deployment)
    assert spec is not None
    volumes = {v["name"]: v.get("secret", {}).get("secretName") for v in spec["volumes"]}
    assert volumes["oidc"] == "enmesh-console-oidc"
    files = _one(capture, "ConfigMap", "local-console")["data"]
    deployed = json.loads(files["deploy.json"])
    ca = Path("/etc/enmesh-console-tls/ca.crt")
    assert deployed["identity"]["consoleSecret"] == "/etc/enmesh-console-oidc/password"
    # enmesh-console's own reading of it, the mounted secret at a path of this machine
    (tmp_path / "password").write_text(secret + "\n")
    deployed["identity"]["consoleSecret"] = str(tmp_path / "password")
    settings = console_main.oidc_of(deployed, "https://localhost:8443", ca)
    assert settings is not None and settings.client_secret == secret
    keycloak = _one(capture, "Deployment", "local-keycloak")
    env = {e["name"]: e.get("value") for e in _container(keycloak)["env"]}
    assert settings.issuer == f"https://{env['KC_HOSTNAME']}:8443/realms/enmesh"
    assert settings.redirect_uri == client["redirectUris"][0]
    assert schema_problems(capture.objects, "1.33") == []
    plain = capture_of("local")  # without consoleUrl: password logins only
    assert (
        "enmesh-console"
        not in _one(plain, "Secret", "local-keycloak-realm")["stringData"]["enmesh-realm.json"]
    )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"console": False, "consolePrometheus": "http://p:9090"}, "consolePrometheus: only"),
        ({"consolePrometheus": "prometheus:9090"}, "consolePrometheus: String should match"),
        ({"consoleUrl": "https://localhost:8443"}, "consoleUrl: browsers must reach Keycloak"),
        (
            {"consoleUrl": "https://c:8443", "identity": "sasldb", "dnsNames": ["a.example"]},
            "consoleUrl: only with enmesh:console: true and enmesh:identity: keycloak",
        ),
    ],
)
def test_bad_console_config_names_its_key(overrides: dict[str, object], message: str) -> None:
    import pulumi  # noqa: PLC0415

    with pytest.raises(pulumi.RunError, match=message):
        run_with("local", **overrides)


# --- the console run from what the program gives it -----------------------------------


class Asgi:
    """Requests straight to the ASGI app (no server, no socket), keeping cookies."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.cookies: dict[str, str] = {}

    def request(
        self, method: str, path: str, form: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], str]:
        # A loop of its own, never the thread's current one: Pulumi's mock runtime (the
        # other tests) needs the thread's loop as it is.
        loop = asyncio.new_event_loop()
        try:
            return loop.run_until_complete(self._request(method, path, form))
        finally:
            loop.close()

    async def _request(
        self, method: str, path: str, form: dict[str, str] | None
    ) -> tuple[int, dict[str, str], str]:
        body = urllib.parse.urlencode(form).encode() if form is not None else b""
        headers = [(b"host", b"console.test")]
        if form is not None:
            headers.append((b"content-type", b"application/x-www-form-urlencoded"))
        if self.cookies:
            cookie = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
            headers.append((b"cookie", cookie.encode()))
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method,
            "scheme": "https",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": headers,
            "client": ("127.0.0.1", 40000),
            "server": ("console.test", 443),
        }
        pending = [{"type": "http.request", "body": body, "more_body": False}]
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            if pending:
                return pending.pop()
            await asyncio.Event().wait()  # the client stays connected
            raise AssertionError("unreachable")

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await self.app(scope, receive, send)
        start = next(m for m in sent if m["type"] == "http.response.start")
        response_headers: dict[str, str] = {}
        for key, value in start["headers"]:
            name, text = key.decode().lower(), value.decode()
            if name == "set-cookie":
                cookie_name, _, rest = text.partition("=")
                self.cookies[cookie_name] = rest.split(";", 1)[0].strip('"')
            response_headers[name] = text
        page = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
        return int(start["status"]), response_headers, page.decode()

    def csrf(self, path: str) -> str:
        status, _, page = self.request("GET", path)
        assert status == 200, page
        token = re.search(r'name="csrf" value="([^"]+)"', page)
        assert token, page
        return token[1]


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def console_on_kubernetes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Asgi, Path]:
    """`enmesh-console` as the local stack's Deployment runs it, on the files of its
    ConfigMap; the routers (pods in a cluster) are a closed local port here, and the mesh's
    verdict on a password is taken as yes (the model still decides who may manage)."""
    capture = capture_of("local")
    files = _one(capture, "ConfigMap", "local-console")["data"]
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    deployment = json.loads(files["deploy.json"])
    deployment["ca"] = SOME_CA  # the pod has the stack's CA mounted; any CA file here
    port = _closed_port()
    for router in deployment["routers"]:
        router["host"], router["ports"]["amqps"] = "127.0.0.1", port
    (tmp_path / "deploy.json").write_text(json.dumps(deployment), encoding="utf-8")
    command = _container(_one(capture, "Deployment", "local-console"))["command"]
    argv = [a.replace(CONFIG_DIR, str(tmp_path)) for a in command[1:]]
    served: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **_: served.update(app=app))
    monkeypatch.setattr(console_app, "check_login", lambda *_args, **_kwargs: True)
    assert console_main.main(argv) == 0
    stack, _ = load_stack(tmp_path / "local.stack.yml")
    return Asgi(served["app"]), runtime_dir(stack)


def _login(client: Asgi) -> None:
    token = client.csrf("/login")
    form = {"csrf": token, "username": "backend@iot", "password": "anything"}
    status, headers, _ = client.request("POST", "/login", form)
    assert (status, headers["location"]) == (303, "/")


def test_on_kubernetes_a_new_address_is_refused_and_nothing_is_written(
    console_on_kubernetes: tuple[Asgi, Path],
) -> None:
    client, runtime = console_on_kubernetes
    before = sorted(runtime.rglob("*")) if runtime.exists() else None
    _login(client)
    token = client.csrf("/spaces/iot/addresses/new")
    form = {"csrf": token, "address": "jobs", "type": "queue", "plan": "standard-queue"}
    status, _, page = client.request("POST", "/spaces/iot/addresses", form)
    assert status == 400
    assert "on Kubernetes the model changes with `pulumi up`" in page.replace("&#96;", "`")
    assert "pulumi up -s local" in page
    assert (sorted(runtime.rglob("*")) if runtime.exists() else None) == before
    # the model is as it was: no `jobs`, and reads still work (stored counts: unknown,
    # there is no Prometheus; the routers cannot be reached here and say so)
    status, _, page = client.request("GET", "/spaces/iot")
    assert status == 200, page
    assert 'id="address-jobs"' not in page
    events = re.search(r'<tr id="address-events">.*?</tr>', page, re.S)
    assert events and '<td class="stored">unknown</td>' in events[0]
    status, _, page = client.request("GET", "/spaces/iot/addresses/events/delete")
    assert status == 200 and "unknown" in page


def test_on_kubernetes_a_new_user_and_a_new_password_are_refused(
    console_on_kubernetes: tuple[Asgi, Path],
) -> None:
    client, _ = console_on_kubernetes
    _login(client)
    token = client.csrf("/spaces/iot/users/new")
    form = {"csrf": token, "username": "clerk", "operations": "send", "addresses": "telemetry"}
    status, _, page = client.request("POST", "/spaces/iot/users", form)
    assert status == 400 and "pulumi up -s local" in page
    token = client.csrf("/spaces/iot/users/device/password")
    status, _, page = client.request(
        "POST", "/spaces/iot/users/device/password", {"csrf": token, "mode": "generate"}
    )
    assert status == 400 and "pulumi up -s local" in page
