"""The Kubernetes broker nodes speak Erlang distribution over TLS, and the CLI tools too.

The Pulumi program's files are checked as generated (mock runtime), then run for real: two
Erlang nodes of this machine's OTP take their arguments from the generated
rabbitmq-env.conf, sourced by `sh` as RabbitMQ's scripts do, with the generated TLS
options pointed at a throw-away PKI.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from enmesh.k8s.capture import Capture
from enmesh.k8s.schema import pod_spec
from tests.pulumi.conftest import capture_of
from tests.support.mesh import wait_until
from tests.support.pki import make_pki
from tests.support.ports import free_port

COOKIE = "a-test-cookie-of-forty-eight-characters-xxxxxxxx"
NODE_A = "enmesh_dist_a@127.0.0.1"


def _statefulset(capture: Capture, name: str) -> dict[str, Any]:
    (found,) = [o for o in capture.kind("StatefulSet") if o["metadata"]["name"] == name]
    return found


def _broker_pod_spec(stack: str) -> dict[str, Any]:
    spec = pod_spec(_statefulset(capture_of(stack), f"{stack}-broker"))
    assert spec is not None
    return spec


def _volume_secret(stack: str, volume: str) -> dict[str, Any]:
    """The Secret behind one of the broker pod's volumes."""
    (found,) = [v for v in _broker_pod_spec(stack)["volumes"] if v["name"] == volume]
    name = found["secret"]["secretName"]
    (secret,) = [o for o in capture_of(stack).kind("Secret") if o["metadata"]["name"] == name]
    return secret


def _broker_files(stack: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The broker's container and the files its config volume mounts, by mounted path."""
    spec = _broker_pod_spec(stack)
    (container,) = [c for c in spec["containers"] if c["name"] == "rabbitmq"]
    mount = next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == "config")
    (volume,) = [v for v in spec["volumes"] if v["name"] == "config"]
    secret = _volume_secret(stack, "config")
    files = {
        f"{mount}/{item['path']}": secret["stringData"][item["key"]]
        for item in volume["secret"]["items"]
    }
    return container, files


def _tls_dist_files(stack: str) -> tuple[str, str, dict[str, Any]]:
    """The env file's text, the TLS options' text and the broker container."""
    container, files = _broker_files(stack)
    env = {e["name"]: e.get("value") for e in container["env"]}
    env_text = files[env["RABBITMQ_CONF_ENV_FILE"]]
    optfile = re.search(r"-ssl_dist_optfile (\S+)", env_text)
    assert optfile is not None, env_text
    return env_text, files[optfile.group(1)], container


def test_the_nodes_and_cli_tools_read_tls_distribution_from_the_mounted_env_file() -> None:
    env_text, options, container = _tls_dist_files("aws")
    tls_secret = _volume_secret("aws", "tls")
    names = {e["name"] for e in container["env"]}
    # Either variable in the environment would override the file's arguments.
    assert not names & {"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS", "RABBITMQ_CTL_ERL_ARGS"}
    for variable in ("SERVER_ADDITIONAL_ERL_ARGS", "CTL_ERL_ARGS"):
        line = next(x for x in env_text.splitlines() if x.startswith(f"{variable}="))
        assert "-proto_dist inet_tls" in line and "-setcookie $ERLANG_COOKIE" in line
    tls_mount = next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == "tls")
    referenced = re.findall(r'\{(?:cacertfile|certfile|keyfile), "([^"]+)"\}', options)
    assert len(referenced) == 6  # CA, certificate and key, for the server and the client
    assert {str(PurePosixPath(p).parent) for p in referenced} == {tls_mount}
    assert {PurePosixPath(p).name for p in referenced} <= set(tls_secret["stringData"])
    assert options.count("{verify, verify_peer}") == 2
    assert "{fail_if_no_peer_cert, true}" in options


@dataclass(frozen=True)
class Dist:
    """Erlang distribution arguments as the generated env file gives them."""

    server: str
    ctl: str
    stranger: str  # the CLI tools' arguments with a certificate from another CA
    env: dict[str, str]


def _sourced(env_file: Path, env: dict[str, str]) -> tuple[str, str]:
    script = f'. {env_file} && printf "%s\\n%s\\n" "$SERVER_ADDITIONAL_ERL_ARGS" "$CTL_ERL_ARGS"'
    done = subprocess.run(
        ["sh", "-c", script], env=env, capture_output=True, text=True, check=True, timeout=30
    )
    server, ctl = done.stdout.splitlines()
    return server, ctl


@pytest.fixture
def dist(tmp_path: Path) -> Iterator[Dist]:
    env_text, options, container = _tls_dist_files("aws")
    tls_mount = next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == "tls")
    components = {PurePosixPath(p).stem for p in re.findall(r'"([^"]+\.(?:crt|key))"', options)}
    optfile, stranger_optfile = tmp_path / "inter_node_tls.config", tmp_path / "stranger.config"
    for pki_dir, options_file in (
        (tmp_path / "pki", optfile),
        (tmp_path / "other", stranger_optfile),
    ):
        pki = make_pki(pki_dir, sorted(components - {"ca"}))
        options_file.write_text(options.replace(f"{tls_mount}/", f"{pki.directory}/"))
    env_file = tmp_path / "rabbitmq-env.conf"
    env_file.write_text(re.sub(r"-ssl_dist_optfile \S+", f"-ssl_dist_optfile {optfile}", env_text))
    epmd_port = str(free_port())
    env = dict(
        os.environ, ERLANG_COOKIE=COOKIE, ERL_EPMD_ADDRESS="127.0.0.1", ERL_EPMD_PORT=epmd_port
    )
    server, ctl = _sourced(env_file, env)
    try:
        stranger = ctl.replace(str(optfile), str(stranger_optfile))
        yield Dist(server=server, ctl=ctl, stranger=stranger, env=env)
    finally:
        subprocess.run(["epmd", "-port", epmd_port, "-kill"], capture_output=True, check=False)


def _erl(args: str, name: str, expression: str) -> list[str]:
    return [
        "erl", "-noshell", "-name", name, *args.split(),
        "-kernel", "inet_dist_use_interface", "{127,0,0,1}",
        "-eval", expression,
    ]  # fmt: skip


def _ping(args: str, env: dict[str, str]) -> str:
    """`pong` or `pang`; OTP's TLS alerts go to the same output, so the answer is marked."""
    expression = f"io:format(\"~nping=~p~n\", [net_adm:ping('{NODE_A}')]), halt()."
    done = subprocess.run(
        _erl(args, "enmesh_dist_b@127.0.0.1", expression),
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    answers = re.findall(r"^ping=(\w+)$", done.stdout, re.MULTILINE)
    assert answers, f"no answer from erl: {done.stdout} {done.stderr}"
    return str(answers[0])


def _node_up(env: dict[str, str]) -> bool:
    names = subprocess.run(
        ["epmd", "-port", env["ERL_EPMD_PORT"], "-names"],
        check=False,
        capture_output=True,
        text=True,
    )
    return "enmesh_dist_a" in names.stdout


def test_generated_arguments_join_nodes_over_tls_and_refuse_plain_distribution(
    dist: Dist,
) -> None:
    node = subprocess.Popen(
        _erl(dist.server, NODE_A, "receive stop -> ok end."),
        env=dist.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_until(lambda: _node_up(dist.env), timeout=30, what="the TLS node registered")
        assert _ping(dist.ctl, dist.env) == "pong"  # a CLI tool with the file's arguments
        plain = f"-setcookie {COOKIE}"  # the right cookie, Erlang distribution in the clear
        assert _ping(plain, dist.env) == "pang"
        assert _ping(dist.stranger, dist.env) == "pang"  # the broker's name, another CA
    finally:
        node.kill()
        node.wait(timeout=30)
