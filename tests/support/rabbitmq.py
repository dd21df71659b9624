"""A real, private RabbitMQ node (the Debian package, 3.10) for tests.

`RabbitMQBroker` starts RabbitMQ in the foreground with everything private to one
directory and on free loopback ports, creates the broker service user, imports a
compiled definitions file, and stops every process it started (also on failure).
`rabbitmq_broker(...)` is the context manager; `tests.support.fixtures` has the pytest
fixture.

How RabbitMQ is run as root, and why
------------------------------------
- `/usr/sbin/rabbitmq-server` (Debian's wrapper) is *not* used: as root it re-executes
  itself with `su rabbitmq`, `cd /var/lib/rabbitmq` and redirects output to
  `/var/log/rabbitmq/`; the `rabbitmq` user cannot read a root-owned pytest temp dir
  (mode 0700). `/usr/lib/rabbitmq/bin/rabbitmq-server` (the upstream script) runs as
  root without complaint and takes all its paths from the environment.
- `RABBITMQ_ALLOW_INPUT` is left unset: then the upstream script stays the parent of
  `erl -noinput` and turns SIGTERM into a clean broker shutdown; with input allowed it
  execs an Erlang shell that halts on EOF of stdin.
- `HOME=<dir>/home` with a random `.erlang.cookie` (mode 0400) written before start: the
  server and every `rabbitmqctl` call share it, and the real `/root/.erlang.cookie` or
  `/var/lib/rabbitmq/.erlang.cookie` is never touched.
- `RABBITMQ_CONF_ENV_FILE` and `RABBITMQ_ADVANCED_CONFIG_FILE` point at private files so
  `/etc/rabbitmq/*` is not read; every inherited `RABBITMQ_*`/`ERL_*` variable is dropped.
- The node name is `enmesh-test-<tls port>@localhost`. RabbitMQ takes it from the
  environment, so the script is started as `rabbitmq-server -enmesh_test_node <node>`
  (an inert `erl` user flag) to put it on the command lines of the script and of
  beam.smp: `pgrep -f enmesh-test` finds running test brokers.

Environment (all paths under the broker directory): `HOME`, `RABBITMQ_NODENAME`,
`RABBITMQ_MNESIA_BASE=mnesia`, `RABBITMQ_LOG_BASE=log`,
`RABBITMQ_ENABLED_PLUGINS_FILE=enabled_plugins` (`[rabbitmq_amqp1_0].` unless `plugins`),
`RABBITMQ_CONFIG_FILE=rabbitmq.conf`, `RABBITMQ_ADVANCED_CONFIG_FILE=advanced.config`,
`RABBITMQ_CONF_ENV_FILE=rabbitmq-env.conf` (empty), `RABBITMQ_PID_FILE`,
`RABBITMQ_DIST_PORT=<free port>`, `ERL_EPMD_ADDRESS=127.0.0.1`,
`ERL_EPMD_PORT=<free port>`, `RABBITMQ_CTL_DIST_PORT_MIN/MAX=<10 free ports>` and
`RABBITMQ_CTL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}` (the CLI tools are
Erlang nodes too), `LC_ALL=C.UTF-8`.

epmd: this module starts its own `epmd -address 127.0.0.1 -port <port>` in the
foreground and stops it by pid. If no epmd answered on `ERL_EPMD_PORT`, Erlang would spawn
`epmd -daemon`, which detaches from the process group and outlives the broker; and a
node started with `-start_epmd false` still had a helper start an epmd on the default
port 4369 on *all* interfaces. Note that epmd always adds the loopback addresses of
both families to `-address`, so it also listens on `[::1]:<port>` (loopback only).

rabbitmq.conf (see `render_config`): no plain AMQP listener (`listeners.tcp = none`),
`listeners.ssl.default = 127.0.0.1:<port>` with the PKI's CA, `broker-<name>.crt/.key`
and `verify_none` (the routers' `broker-tls` sslProfile has no client certificate),
`distribution.listener.interface = 127.0.0.1`, `loopback_users = none`,
`load_definitions = <compiled definitions>`, `amqp1_0.default_user = none` (no
ANONYMOUS fallback to `guest`) and `amqp1_0.default_vhost = enmesh` (see below).

Users and definitions, in this order
------------------------------------
1. Boot with `load_definitions`. On the first boot the import stops silently at the
   permissions of `enmesh-router` (the user does not exist yet: the log says
   "Failed to set permissions for 'enmesh-router': the user does not exist") after the
   vhosts, so no queues, exchanges, bindings or policies exist, yet the node reports
   startup complete. Because definitions are being loaded, RabbitMQ does not seed the
   default `guest` user or `/` vhost.
2. `rabbitmqctl add_user enmesh-router` with the password on stdin (3.10 reads it from
   stdin when the argument is omitted), then `delete_user guest` if it exists.
3. `rabbitmqctl import_definitions <file>`: now complete. (Before step 2 it fails with
   `{:no_such_user, "enmesh-router"}`, exit 69.)
Later boots (`restart()`) re-apply the same definitions at boot, now completely.

AMQP 1.0 virtual host selection (3.10 plugin): the open frame's hostname selects the
vhost only in the form `vhost:<name>`; any other hostname (`enmesh`, `127.0.0.1`, ...)
means `amqp1_0.default_vhost` (default `/`, which does not even exist here). The
enmesh-router's connectors send the connector `host` (`127.0.0.1`) as the hostname, so a
broker serving routers needs `amqp1_0.default_vhost = enmesh` (set here by default).

Other RabbitMQ 3.10 AMQP 1.0 behaviours the selftest pins down: the `modified` outcome
is refused (the session ends with amqp:invalid-field, the message is requeued;
`released` works and counts towards `x-delivery-limit`); a link `detach(closed=true)` is
answered with `detach(closed=false)`; `/exchange/X/#` sources create a server-named
classic queue that outlives the link (RabbitMQ issue #2588) unless a policy expires it.

Readiness is `rabbitmqctl await_startup` polled with a deadline (it fails at once while
the node is not registered yet) while watching the server process; on timeout or early
exit the error carries the tail of the broker's logs. Stop is `rabbitmqctl stop`, then
SIGTERM and SIGKILL to the process group if needed, then epmd.

Secrets: the router user's password is random, given to `rabbitmqctl` on stdin only and
scrubbed from every error message; it is not in any file the broker writes.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import string
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proton import SSLDomain
from proton.utils import BlockingConnection

from tests.support.pki import Pki, broker_component, make_pki
from tests.support.ports import HOST, free_port_block, port_is_listening

RABBITMQ_BIN = Path("/usr/lib/rabbitmq/bin")
ROUTER_USER = "enmesh-router"
VHOST = "enmesh"
START_TIMEOUT = 90.0
STOP_TIMEOUT = 60.0
CTL_TIMEOUT = 120.0
_CTL_PORTS = 10


class RabbitMQError(RuntimeError):
    """RabbitMQ did not start, stop, or accept a command."""


@dataclass
class BrokerPorts:
    tls: int
    dist: int
    epmd: int
    ctl_min: int
    ctl_max: int


def allocate_ports() -> BrokerPorts:
    """Free loopback ports for one broker: TLS, distribution, epmd, and a CLI range, in
    one block. Picked apart, the CLI range could hold the distribution port (nothing is
    bound between the picks), and a CLI tool polling the starting node then took it
    first: the node stopped with `nodistribution`."""
    base = free_port_block(3 + _CTL_PORTS)
    ctl = base + 3
    return BrokerPorts(
        tls=base, dist=base + 1, epmd=base + 2, ctl_min=ctl, ctl_max=ctl + _CTL_PORTS - 1
    )


def render_config(
    *,
    tls_port: int,
    pki: Pki,
    broker_cert: str,
    definitions: Path | None,
    default_vhost: str | None,
    extra: Sequence[str] = (),
) -> str:
    """rabbitmq.conf (new-style) for a loopback-only, TLS-only AMQP 1.0 broker.

    `extra` lines are appended: e.g. the `ssl_options` TLS policy of a compiled
    rabbitmq.conf, or an MQTT TLS listener (with `plugins` naming rabbitmq_mqtt).
    """
    lines = [
        "# Generated by tests/support/rabbitmq.py",
        "listeners.tcp = none",
        f"listeners.ssl.default = {HOST}:{tls_port}",
        f"ssl_options.cacertfile = {pki.ca_cert}",
        f"ssl_options.certfile = {pki.cert(broker_cert)}",
        f"ssl_options.keyfile = {pki.key(broker_cert)}",
        "ssl_options.verify = verify_none",
        "ssl_options.fail_if_no_peer_cert = false",
        f"distribution.listener.interface = {HOST}",
        "loopback_users = none",
        "amqp1_0.default_user = none",
        "log.console = false",
        "log.file.level = info",
        "disk_free_limit.absolute = 50MB",
    ]
    if definitions is not None:
        lines.append(f"load_definitions = {definitions}")
    if default_vhost is not None:
        lines.append(f"amqp1_0.default_vhost = {default_vhost}")
    lines.extend(extra)
    return "\n".join(lines) + "\n"


@dataclass
class RabbitMQBroker:
    """One private RabbitMQ node. Use as a context manager, or call start()/stop().

    `definitions` is a compiled `brokers/<broker>.definitions.json`; `pki` must contain
    the component `broker_component(broker_name)` (made here if `pki` is None).
    """

    directory: Path
    definitions: Path | None
    pki: Pki | None = None
    broker_name: str = "broker-0"
    default_vhost: str | None = VHOST
    router_user: str = ROUTER_USER
    host: str = HOST
    ports: BrokerPorts = field(default_factory=allocate_ports)
    extra_config: Sequence[str] = ()  # more rabbitmq.conf lines (see render_config)
    plugins: Sequence[str] = ("rabbitmq_amqp1_0",)
    router_password: str = field(default_factory=lambda: secrets.token_urlsafe(24), repr=False)
    _server: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _epmd: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _provisioned: bool = field(default=False, init=False, repr=False)

    def __post_init__(self) -> None:
        self.directory = self.directory.resolve()
        self.directory.mkdir(parents=True, exist_ok=True)
        if self.pki is None:
            self.pki = make_pki(self.directory / "tls", [broker_component(self.broker_name)])
        if self.definitions is not None:
            self.definitions = self.definitions.resolve()

    # ---- what tests use -------------------------------------------------------------

    @property
    def node(self) -> str:
        return f"enmesh-test-{self.ports.tls}@localhost"

    @property
    def tls_port(self) -> int:
        return self.ports.tls

    @property
    def ca_cert(self) -> Path:
        assert self.pki is not None
        return self.pki.ca_cert

    @property
    def url(self) -> str:
        return f"amqps://{self.host}:{self.ports.tls}"

    @property
    def log_file(self) -> Path:
        return self.directory / "log" / f"{self.node}.log"

    @property
    def running(self) -> bool:
        return self._server is not None and self._server.poll() is None

    def ctl(
        self,
        *args: str,
        stdin: str | None = None,
        check: bool = True,
        timeout: float = CTL_TIMEOUT,
    ) -> subprocess.CompletedProcess[str]:
        """Run `rabbitmqctl -n NODE -q ARGS` with this broker's environment.

        Output is returned; on failure (with `check`) RabbitMQError carries the output
        with the router password scrubbed.
        """
        return self._run_tool("rabbitmqctl", *args, stdin=stdin, check=check, timeout=timeout)

    def list_queues(self, *columns: str) -> list[dict[str, str]]:
        """`rabbitmqctl list_queues -p <vhost>` as dicts, one per queue."""
        cols = columns or ("name", "messages")
        out = self.ctl("list_queues", "-p", VHOST, "--no-table-headers", *cols).stdout
        rows = []
        for line in out.splitlines():
            if not line.strip():
                continue
            values = line.split("\t")
            rows.append(dict(zip(cols, values, strict=False)))
        return rows

    def connect(
        self,
        virtual_host: str | None = f"vhost:{VHOST}",
        user: str | None = None,
        password: str | None = None,
        mechs: str = "PLAIN",
        timeout: float = 10.0,
        **kwargs: Any,
    ) -> Any:
        """A `proton.utils.BlockingConnection` to this broker over TLS (SASL PLAIN as the
        router user by default), verifying the broker certificate against the CA and
        the name `127.0.0.1`.

        `virtual_host` is the open frame's hostname: `vhost:enmesh` selects the vhost
        explicitly; None sends the URL host, which the broker maps to
        `amqp1_0.default_vhost`. `sni` is always set to the host: proton otherwise uses
        `virtual_host` as the TLS peer name and verification fails.

        Close the connection rather than single links: RabbitMQ 3.10 answers a link
        `detach(closed=true)` with `detach(closed=false)`, so `BlockingLink.close()`
        waits for a close that never comes and times out.
        """
        extra: dict[str, Any] = {"sni": self.host, **kwargs}
        if virtual_host is not None:
            extra["virtual_host"] = virtual_host
        return BlockingConnection(
            self.url,
            timeout=timeout,
            ssl_domain=client_ssl_domain(self.ca_cert),
            user=self.router_user if user is None else user,
            password=self.router_password if password is None else password,
            allowed_mechs=mechs,
            allow_insecure_mechs=False,
            **extra,
        )

    def log_tail(self, lines: int = 60) -> str:
        """The last lines of the node log and of the server's stdout/stderr."""
        parts = []
        for path in (self.directory / "log" / "server.out", self.log_file):
            if path.exists():
                text = path.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"--- {path} ---\n" + "\n".join(text))
        return self._scrub("\n".join(parts) or "(no log written)")

    # ---- lifecycle ------------------------------------------------------------------

    def __enter__(self) -> RabbitMQBroker:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Start the node, wait until it is up, provision users and definitions once."""
        if self.running:
            raise RabbitMQError(f"{self.node} is already running")
        self._write_files()
        try:
            self._start_epmd()
            self._start_server()
            self._await_startup(timeout)
            if not self._provisioned:
                self._provision()
                self._provisioned = True
        except BaseException:
            self.stop()
            raise

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Stop the node (data is kept) and epmd; never raises for an already-dead node."""
        server, self._server = self._server, None
        try:
            if server is not None:
                self._stop_server(server, timeout)
        finally:
            self._kill_leftovers()
            self._stop_epmd()

    def power_off(self) -> None:
        """SIGKILL the node and epmd at once, as a host losing power: no clean shutdown.
        `start` brings it back with the same data."""
        server, self._server = self._server, None
        if server is not None:
            _killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=15)
        self._kill_leftovers()
        self._stop_epmd()

    def _stop_epmd(self) -> None:
        epmd, self._epmd = self._epmd, None
        if epmd is not None:
            _terminate(epmd, 10.0)

    def restart(self, timeout: float = START_TIMEOUT) -> None:
        """Stop and start again with the same ports, data, users and definitions."""
        self.stop()
        self.start(timeout)

    # ---- internals ------------------------------------------------------------------

    def _scrub(self, text: str) -> str:
        return text.replace(self.router_password, "********") if self.router_password else text

    def _env(self) -> dict[str, str]:
        base = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("RABBITMQ_", "ERL_", "PN_TRACE"))
            and k not in {"HOME", "LANG", "LC_ALL"}
        }
        d = self.directory
        base.update(
            {
                "HOME": str(d / "home"),
                "LANG": "C.UTF-8",
                "LC_ALL": "C.UTF-8",
                "RABBITMQ_NODENAME": self.node,
                "RABBITMQ_MNESIA_BASE": str(d / "mnesia"),
                "RABBITMQ_LOG_BASE": str(d / "log"),
                "RABBITMQ_ENABLED_PLUGINS_FILE": str(d / "enabled_plugins"),
                "RABBITMQ_CONFIG_FILE": str(d / "rabbitmq.conf"),
                "RABBITMQ_ADVANCED_CONFIG_FILE": str(d / "advanced.config"),
                "RABBITMQ_CONF_ENV_FILE": str(d / "rabbitmq-env.conf"),
                "RABBITMQ_PID_FILE": str(d / "rabbitmq.pid"),
                "RABBITMQ_DIST_PORT": str(self.ports.dist),
                "ERL_EPMD_ADDRESS": HOST,
                "ERL_EPMD_PORT": str(self.ports.epmd),
                "RABBITMQ_CTL_DIST_PORT_MIN": str(self.ports.ctl_min),
                "RABBITMQ_CTL_DIST_PORT_MAX": str(self.ports.ctl_max),
                "RABBITMQ_CTL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
            }
        )
        return base

    def _write_files(self) -> None:
        d = self.directory
        for sub in ("home", "mnesia", "log"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        cookie = d / "home" / ".erlang.cookie"
        if not cookie.exists():
            alphabet = string.ascii_uppercase + string.digits
            value = "".join(secrets.choice(alphabet) for _ in range(32))
            fd = os.open(cookie, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
            with os.fdopen(fd, "w") as f:
                f.write(value)
        (d / "enabled_plugins").write_text(f"[{','.join(self.plugins)}].\n")
        (d / "advanced.config").write_text("[].\n")
        (d / "rabbitmq-env.conf").write_text("")
        assert self.pki is not None
        (d / "rabbitmq.conf").write_text(
            render_config(
                tls_port=self.ports.tls,
                pki=self.pki,
                broker_cert=broker_component(self.broker_name),
                definitions=self.definitions,
                default_vhost=self.default_vhost,
                extra=self.extra_config,
            )
        )

    def _start_epmd(self) -> None:
        epmd = shutil.which("epmd") or "/usr/bin/epmd"
        self._epmd = subprocess.Popen(
            [epmd, "-address", HOST, "-port", str(self.ports.epmd)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=self._env(),
            start_new_session=True,
        )
        deadline = time.monotonic() + 10
        while not port_is_listening(self.ports.epmd):
            if self._epmd.poll() is not None:
                raise RabbitMQError(f"epmd exited with {self._epmd.returncode}")
            if time.monotonic() > deadline:
                raise RabbitMQError(f"epmd not listening on {HOST}:{self.ports.epmd}")
            time.sleep(0.05)

    def _start_server(self) -> None:
        out = self.directory / "log" / "server.out"
        with out.open("ab") as log:
            # The script passes its arguments to `erl`; `-enmesh_test_node NODE` is an
            # inert user flag that puts the node name on the command lines of the script
            # and of beam.smp (RabbitMQ takes the name from the environment otherwise),
            # so `pgrep -f NODE` finds them.
            self._server = subprocess.Popen(
                [str(RABBITMQ_BIN / "rabbitmq-server"), "-enmesh_test_node", self.node],
                cwd=self.directory,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self._env(),
                start_new_session=True,  # its own process group, killed as a whole
            )

    def _await_startup(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while True:
            server = self._server
            if server is None or server.poll() is not None:
                code = None if server is None else server.returncode
                raise RabbitMQError(
                    f"RabbitMQ {self.node} exited during startup (status {code}):\n"
                    + self.log_tail()
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RabbitMQError(
                    f"RabbitMQ {self.node} not up within {timeout:.0f}s; last check: {last}\n"
                    + self.log_tail()
                )
            result = self._run_tool(
                "rabbitmqctl",
                "await_startup",
                "--timeout",
                str(max(1, int(remaining))),
                check=False,
                timeout=remaining + 15,
            )
            if result.returncode == 0:
                return
            lines = (result.stderr or result.stdout).strip().splitlines()
            last = self._scrub(lines[0]) if lines else f"exit {result.returncode}"
            time.sleep(0.25)

    def _provision(self) -> None:
        # The password goes to rabbitmqctl on stdin (3.10 reads it when the argument is
        # omitted), never on a command line.
        self.ctl("add_user", self.router_user, stdin=self.router_password + "\n")
        # `guest` is only seeded when no definitions are loaded at boot; not an error.
        self.ctl("delete_user", "guest", check=False)
        if self.definitions is not None:
            self.ctl("import_definitions", str(self.definitions))

    def _run_tool(
        self,
        tool: str,
        *args: str,
        stdin: str | None = None,
        check: bool = True,
        timeout: float = CTL_TIMEOUT,
    ) -> subprocess.CompletedProcess[str]:
        cmd = [str(RABBITMQ_BIN / tool), "-n", self.node, "-q", *args]
        try:
            result = subprocess.run(
                cmd,
                input=stdin if stdin is not None else "",
                capture_output=True,
                text=True,
                env=self._env(),
                cwd=self.directory,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise RabbitMQError(f"{tool} {' '.join(args[:1])} timed out after {timeout}s") from None
        if check and result.returncode != 0:
            output = self._scrub((result.stdout + result.stderr).strip())
            raise RabbitMQError(f"{tool} {' '.join(args)} failed ({result.returncode}): {output}")
        return result

    def _stop_server(self, server: subprocess.Popen[bytes], timeout: float) -> None:
        if server.poll() is None:
            result = None
            with contextlib.suppress(RabbitMQError):
                result = self._run_tool("rabbitmqctl", "stop", check=False, timeout=timeout)
            if result is None or result.returncode != 0:
                # Not reachable (still booting, or wedged): the script turns SIGTERM into
                # a clean shutdown of the VM.
                _killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                _killpg(server.pid, signal.SIGKILL)
                server.wait(timeout=15)
        # The server's children (erl_child_setup, inet_gethost) are in their own groups
        # and exit with the VM; anything named after this node is swept below.

    def _kill_leftovers(self) -> None:
        for pid in node_processes(self.node):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def client_ssl_domain(ca_cert: Path, verify_name: bool = True) -> Any:
    """A proton client `SSLDomain` trusting `ca_cert` (and checking the peer name)."""
    domain = SSLDomain(SSLDomain.MODE_CLIENT)
    domain.set_trusted_ca_db(str(ca_cert))
    domain.set_peer_authentication(
        SSLDomain.VERIFY_PEER_NAME if verify_name else SSLDomain.VERIFY_PEER
    )
    return domain


def node_processes(node: str) -> list[int]:
    """Pids of live processes whose command line mentions `node` (not zombies)."""
    result = subprocess.run(
        ["pgrep", "-f", node], capture_output=True, text=True, check=False, timeout=10
    )
    pids = []
    for word in result.stdout.split():
        pid = int(word)
        if pid == os.getpid():
            continue
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            pids.append(pid)
    return pids


def _killpg(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _terminate(proc: subprocess.Popen[Any], timeout: float) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)


@contextlib.contextmanager
def rabbitmq_broker(
    directory: Path,
    definitions: Path | None,
    pki: Pki | None = None,
    broker_name: str = "broker-0",
    default_vhost: str | None = VHOST,
) -> Iterator[RabbitMQBroker]:
    """Start a private broker in `directory`, yield it, always stop it."""
    broker = RabbitMQBroker(
        directory=directory,
        definitions=definitions,
        pki=pki,
        broker_name=broker_name,
        default_vhost=default_vhost,
    )
    with broker:
        yield broker


def parse_queue_arguments(text: str) -> Mapping[str, str]:
    """`[{"x-queue-type","quorum"},{"x-delivery-limit",5}]` -> {"x-queue-type": "quorum", ...}.

    Values are returned as rabbitmqctl prints them (strings unquoted, `[]` for "").
    """
    inner = text.strip()
    if inner.startswith("[") and inner.endswith("]"):
        inner = inner[1:-1]
    result: dict[str, str] = {}
    for raw in inner.split("},{"):
        item = raw.strip("{}")
        if not item:
            continue
        key, _, value = item.partition(",")
        result[key.strip('"')] = value.strip('"')
    return result


__all__: Sequence[str] = (
    "ROUTER_USER",
    "VHOST",
    "BrokerPorts",
    "RabbitMQBroker",
    "RabbitMQError",
    "allocate_ports",
    "client_ssl_domain",
    "node_processes",
    "parse_queue_arguments",
    "rabbitmq_broker",
    "render_config",
)
