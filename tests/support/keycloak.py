"""A real PostgreSQL and a real Keycloak (production mode, TLS) for tests.

PostgreSQL comes from Debian's package (its binaries under /usr/lib/postgresql/<v>/bin),
a throw-away cluster run as the `postgres` user (it refuses root). Keycloak is the
distribution enmesh.deploy.keycloak_dist fetches from Maven Central and builds for
PostgreSQL, started with `kc.sh start --optimized` on free ports.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from enmesh.deploy import keycloak_dist
from tests.support.ports import free_port

START_TIMEOUT = 300.0  # Keycloak's first start on a busy 2-core machine


def _pg_bin() -> Path:
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if not versions:
        raise RuntimeError("PostgreSQL is not installed (Debian package postgresql)")
    return versions[-1].parent


def _wait(condition: Any, timeout: float, what: str, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    tail = log.read_text(errors="replace")[-3000:] if log and log.exists() else ""
    raise RuntimeError(f"{what} not ready after {timeout:.0f} s\n{tail}")


@dataclass
class Postgres:
    directory: Path
    port: int
    password: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.directory.mkdir(mode=0o700)
        shutil.chown(self.directory, "postgres", "postgres")
        data = self.directory / "data"
        pwfile = self.directory / "pw"
        pwfile.write_text(self.password + "\n")
        shutil.chown(pwfile, "postgres", "postgres")
        self._as_postgres(
            str(_pg_bin() / "initdb"),
            "-D",
            str(data),
            "-U",
            "keycloak",
            "--pwfile",
            str(pwfile),
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            "--no-sync",
        )
        self.log = self.directory / "postgres.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [
                    "runuser",
                    "-u",
                    "postgres",
                    "--",
                    str(_pg_bin() / "postgres"),
                    "-D",
                    str(data),
                    "-p",
                    str(self.port),
                    "-k",
                    str(self.directory),
                    "-h",
                    "127.0.0.1",
                    "-F",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        _wait(self._ready, 60, "PostgreSQL", self.log)
        self._as_postgres(
            str(_pg_bin() / "createdb"),
            "-h",
            str(self.directory),
            "-p",
            str(self.port),
            "-U",
            "keycloak",
            "keycloak",
        )

    def _ready(self) -> bool:
        result = subprocess.run(
            [str(_pg_bin() / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)],
            capture_output=True,
            check=False,
        )
        return result.returncode == 0

    def _as_postgres(self, *command: str) -> None:
        subprocess.run(
            ["runuser", "-u", "postgres", "--", *command], check=True, capture_output=True, cwd="/"
        )

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(30)
        shutil.rmtree(self.directory.parent, ignore_errors=True)


@dataclass
class Keycloak:
    home: Path
    state: Path
    cert: Path
    key: Path
    ca: Path
    database: Postgres
    port: int = field(default_factory=free_port)
    management_port: int = field(default_factory=free_port)
    admin_password: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    process: subprocess.Popen[bytes] | None = None
    started_in: float = 0.0

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.log = self.state / "keycloak.log"
        env = {
            **os.environ,
            "JAVA_HOME": str(keycloak_dist.java_home()),
            "KC_BOOTSTRAP_ADMIN_USERNAME": "admin",
            "KC_BOOTSTRAP_ADMIN_PASSWORD": self.admin_password,
            "KC_DB_PASSWORD": self.database.password,
        }
        begun = time.monotonic()
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [
                    str(self.home / "bin" / "kc.sh"),
                    "start",
                    "--optimized",
                    f"--db-url=jdbc:postgresql://127.0.0.1:{self.database.port}/keycloak",
                    "--db-username=keycloak",
                    f"--https-port={self.port}",
                    "--http-enabled=false",
                    f"--https-certificate-file={self.cert}",
                    f"--https-certificate-key-file={self.key}",
                    f"--hostname={self.url}",
                    "--http-host=127.0.0.1",
                    f"--http-management-port={self.management_port}",
                ],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        _wait(self._ready, START_TIMEOUT, "Keycloak", self.log)
        self.started_in = time.monotonic() - begun

    def _tls(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca))

    def _ready(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(f"Keycloak exited: {self.log.read_text()[-3000:]}")
        try:
            url = f"https://127.0.0.1:{self.management_port}/health/ready"
            with urllib.request.urlopen(url, timeout=2, context=self._tls()) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    def admin_token(self) -> str:
        form = urllib.parse.urlencode(
            {
                "grant_type": "password",
                "client_id": "admin-cli",
                "username": "admin",
                "password": self.admin_password,
            }
        ).encode()
        url = f"{self.url}/realms/master/protocol/openid-connect/token"
        with urllib.request.urlopen(url, data=form, timeout=30, context=self._tls()) as answer:
            return str(json.load(answer)["access_token"])

    def admin(self, method: str, path: str, body: Any = None) -> Any:
        """A call of Keycloak's admin REST API (path after /admin/realms)."""
        request = urllib.request.Request(
            f"{self.url}/admin/realms{path}",
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={
                "Authorization": f"Bearer {self.admin_token()}",
                "Content-Type": "application/json",
            },
        )
        with urllib.request.urlopen(request, timeout=60, context=self._tls()) as answer:
            text = answer.read()
            return json.loads(text) if text else None

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def java_pid(self) -> int:
        """The Keycloak JVM's process (kc.sh starts java as its child, or execs it)."""
        assert self.process is not None
        pid = self.process.pid
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        return int(children[0]) if children else pid

    def rss_kib(self) -> int:
        """Resident memory of the Keycloak JVM."""
        status = Path(f"/proc/{self.java_pid()}/status").read_text()
        rss = next(line for line in status.splitlines() if line.startswith("VmRSS"))
        return int(rss.split()[1])


def start_keycloak(state: Path, cert: Path, key: Path, ca: Path) -> Keycloak:
    """PostgreSQL, then Keycloak on it; the caller stops both (Keycloak first)."""
    home = keycloak_dist.installed()
    parent = Path(tempfile.mkdtemp(prefix="enmesh-pg-"))
    parent.chmod(0o755)  # the postgres user must reach its directory inside
    database = Postgres(parent / "pg", free_port())
    database.start()
    keycloak = Keycloak(home, state, cert, key, ca, database)
    try:
        keycloak.start()
    except BaseException:
        keycloak.stop()
        database.stop()
        raise
    return keycloak
