"""A site of N Debian 12 hosts on this machine: systemd-nspawn containers booting systemd
as PID 1, each in its own network namespace with a veth to a private bridge, reached
over SSH with a key made for the site.

Everything a site creates is named after it, so `destroy` finds it again from a fresh
process (molecule runs create and destroy in different ones) and leaves nothing behind:
the nspawn processes and their cgroups, the overlay mounts, the network namespaces, the
veths and the bridge, the tmpfs on /run/systemd/nspawn (when the site mounted it), the
work directory. See docs/sites.md.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from tests.support.sites.base import ensure_base

WORK_ROOT = Path(os.environ.get("ENMESH_SITES_WORK", "/var/lib/enmesh-sites"))
CGROUP_V1 = Path("/sys/fs/cgroup/systemd")
CGROUP_V2 = Path("/sys/fs/cgroup/unified")
NSPAWN_RUN = Path("/run/systemd/nspawn")
# Storage every host mounts at the same path, as a site's NFS export would be: the Spark
# hosts keep the job's checkpoint there (roles/spark, enmesh_spark_shared_dir).
SHARED_MOUNT = "/srv/enmesh-shared"
SSH_OPTS = (
    "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
    "-o", "LogLevel=ERROR", "-o", "BatchMode=yes", "-o", "ConnectTimeout=3",
)  # fmt: skip


class SiteError(RuntimeError):
    """A step of create/destroy failed; the message names the host and the step."""


@dataclass(frozen=True)
class Host:
    name: str
    address: str
    index: int


@dataclass(frozen=True)
class SiteSpec:
    """`name` keys every resource: at most 8 characters so interface names fit in 15."""

    name: str = "site"
    hosts: int = 3
    network: str = "192.168.251.0/24"

    def __post_init__(self) -> None:
        if not (self.name.isalnum() and self.name.islower() and len(self.name) <= 8):
            raise SiteError(f"site name {self.name!r}: lowercase letters/digits, at most 8")
        net = ipaddress.ip_network(self.network)
        if not net.is_private or net.num_addresses < self.hosts + 11:
            raise SiteError(f"site network {self.network}: a private range with room for hosts")

    @property
    def work(self) -> Path:
        return WORK_ROOT / self.name

    @property
    def bridge(self) -> str:
        return f"enm-{self.name}"

    @property
    def gateway(self) -> str:
        return str(ipaddress.ip_network(self.network).network_address + 1)

    @property
    def prefix(self) -> int:
        return ipaddress.ip_network(self.network).prefixlen

    @property
    def shared(self) -> Path:
        """The machine's side of the site's shared storage (SHARED_MOUNT on every host)."""
        return self.work / "shared"

    @property
    def key(self) -> Path:
        return self.work / "id_ed25519"

    def host_list(self) -> list[Host]:
        base = ipaddress.ip_network(self.network).network_address
        return [Host(f"{self.name}-h{i}", str(base + 11 + i), i) for i in range(self.hosts)]

    def netns(self, host: Host) -> str:
        return f"enm-{host.name}"

    def veth(self, host: Host) -> str:
        return f"ve-{self.name}-{host.index}"

    def cgroup(self, host: Host) -> str:
        return f"enmesh-sites/{host.name}"


def _sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise SiteError(f"`{' '.join(argv)}` failed ({done.returncode}): {done.stderr.strip()}")
    return done


def _is_mount(path: Path) -> bool:
    target = str(path)
    with Path("/proc/self/mounts").open() as mounts:
        return any(line.split()[1] == target for line in mounts)


# --- create -------------------------------------------------------------------------


def create(spec: SiteSpec, boot_timeout: float = 120.0) -> list[Host]:
    """Bring the site up; on any failure, destroy what was made and raise."""
    rootfs = ensure_base()
    if spec.work.exists():
        destroy(spec)  # a leftover of a killed run: start clean
    spec.work.mkdir(parents=True)
    spec.shared.mkdir()
    try:
        _ssh_key(spec)
        _nspawn_run_dir(spec)
        _bridge(spec)
        hosts = spec.host_list()
        for host in hosts:
            _network(spec, host)
            _overlay(spec, host, rootfs, hosts)
            _boot(spec, host)
        for host in hosts:
            wait_ssh(spec, host, boot_timeout)
        (spec.work / "site.json").write_text(
            json.dumps({"spec": asdict(spec), "hosts": [asdict(h) for h in hosts]}, indent=2)
        )
        return hosts
    except BaseException:
        destroy(spec)
        raise


def _ssh_key(spec: SiteSpec) -> None:
    _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"enmesh-site-{spec.name}",
        "-f", str(spec.key))  # fmt: skip


def _nspawn_run_dir(spec: SiteSpec) -> None:
    # /run here is not a tmpfs, and nspawn refuses to keep its state on anything else.
    if not _is_mount(NSPAWN_RUN):
        NSPAWN_RUN.mkdir(parents=True, exist_ok=True)
        _sh("mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", str(NSPAWN_RUN))
        (spec.work / "mounted-nspawn-run").touch()


def _bridge(spec: SiteSpec) -> None:
    if Path(f"/sys/class/net/{spec.bridge}").exists():
        raise SiteError(f"bridge {spec.bridge} exists: another site of that name is up")
    _sh("ip", "link", "add", spec.bridge, "type", "bridge")
    _sh("ip", "addr", "add", f"{spec.gateway}/{spec.prefix}", "dev", spec.bridge)
    _sh("ip", "link", "set", spec.bridge, "up")


def _network(spec: SiteSpec, host: Host) -> None:
    ns, veth = spec.netns(host), spec.veth(host)
    _sh("ip", "netns", "add", ns)
    _sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "host0", "netns", ns)
    _sh("ip", "link", "set", veth, "master", spec.bridge, "up")
    inside = ("ip", "netns", "exec", ns, "ip")
    _sh(*inside, "link", "set", "lo", "up")
    _sh(*inside, "addr", "add", f"{host.address}/{spec.prefix}", "dev", "host0")
    _sh(*inside, "link", "set", "host0", "up")


def _overlay(spec: SiteSpec, host: Host, rootfs: Path, hosts: list[Host]) -> None:
    top = spec.work / host.name
    upper, work, merged = top / "upper", top / "work", top / "root"
    for path in (upper, work, merged):
        path.mkdir(parents=True)
    # What makes this host itself, written into its upper layer before it boots.
    etc = upper / "etc"
    (etc / "ssh").mkdir(parents=True)
    _sh("ssh-keygen", "-q", "-A", "-f", str(upper))  # own SSH host keys
    (etc / "hostname").write_text(host.name + "\n")
    lines = ["127.0.0.1 localhost", *(f"{h.address} {h.name}" for h in hosts)]
    (etc / "hosts").write_text("\n".join(lines) + "\n")
    ssh = upper / "root/.ssh"
    ssh.mkdir(parents=True, mode=0o700)
    (ssh / "authorized_keys").write_text(spec.key.with_suffix(".pub").read_text())
    (ssh / "authorized_keys").chmod(0o600)
    opts = f"lowerdir={rootfs},upperdir={upper},workdir={work}"
    _sh("mount", "-t", "overlay", "overlay", "-o", opts, str(merged))


def _join_cgroups(paths: list[Path]) -> None:
    for path in paths:
        (path / "cgroup.procs").write_text(str(os.getpid()))


def _boot(spec: SiteSpec, host: Host) -> None:
    # PID 1 of this machine is not systemd: nspawn runs unregistered, each in a cgroup of
    # its own (both hierarchies of the v1 hybrid layout), made before it starts.
    cgroups = [root / spec.cgroup(host) for root in (CGROUP_V1, CGROUP_V2)]
    for path in cgroups:
        path.mkdir(parents=True, exist_ok=True)
    log = (spec.work / host.name / "nspawn.log").open("w")
    argv = [
        "systemd-nspawn", "--boot", "--register=no", "--keep-unit", "--quiet",
        f"--directory={spec.work / host.name / 'root'}", f"--machine={host.name}",
        f"--network-namespace-path=/run/netns/{spec.netns(host)}",
        "--console=passive", "--link-journal=no", "--resolv-conf=off", "--timezone=off",
        f"--bind={spec.shared}:{SHARED_MOUNT}",
    ]  # fmt: skip
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # outlives the caller (molecule's create step)
        preexec_fn=lambda: _join_cgroups(cgroups),  # noqa: PLW1509
    )
    (spec.work / host.name / "nspawn.pid").write_text(f"{proc.pid}\n")


def wait_ssh(spec: SiteSpec, host: Host, timeout: float) -> None:
    """Poll until the host runs sshd and systemd finished booting (or degraded)."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if not host_running(spec, host):
            raise SiteError(f"{host.name}: nspawn exited; see {spec.work / host.name}/nspawn.log")
        done = ssh(spec, host, "systemctl is-system-running --wait", check=False)
        state = done.stdout.strip()
        if state in ("running", "degraded"):
            return
        last = state or done.stderr.strip()
        time.sleep(0.5)
    raise SiteError(f"{host.name} ({host.address}) not up in {timeout:.0f}s: {last}")


def ssh(
    spec: SiteSpec, host: Host, command: str, check: bool = True
) -> subprocess.CompletedProcess[str]:
    argv = ["ssh", *SSH_OPTS, "-i", str(spec.key), f"root@{host.address}", command]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    if check and done.returncode != 0:
        raise SiteError(f"{host.name}: `{command}` failed ({done.returncode}): {done.stderr}")
    return done


# --- faults ---------------------------------------------------------------------------


def _nspawn_pid(spec: SiteSpec, host: Host) -> int | None:
    try:
        return int((spec.work / host.name / "nspawn.pid").read_text())
    except (OSError, ValueError):
        return None


def host_running(spec: SiteSpec, host: Host) -> bool:
    return bool(_cgroup_pids(spec, host))


def _cgroup_pids(spec: SiteSpec, host: Host) -> list[int]:
    pids: set[int] = set()
    for root in (CGROUP_V1, CGROUP_V2):
        base = root / spec.cgroup(host)
        for folder, _, files in os.walk(base):  # a unit's cgroup may vanish mid-walk: skipped
            if "cgroup.procs" in files:
                try:
                    pids.update(int(p) for p in (Path(folder) / "cgroup.procs").read_text().split())
                except OSError:
                    continue
    return sorted(pids)


def power_off(spec: SiteSpec, host: Host) -> None:
    """Pull the plug: SIGKILL every process of the host at once (no shutdown). Its link
    goes down first, as a powered-off machine's does, so the FIN or RST the kernel sends
    for the killed processes' sockets never reaches a peer: peers notice by silence."""
    _sh("ip", "link", "set", spec.veth(host), "down")
    kill = CGROUP_V2 / spec.cgroup(host) / "cgroup.kill"
    if kill.exists():
        kill.write_text("1")
    for pid in _cgroup_pids(spec, host):
        _signal(pid, signal.SIGKILL)
    _wait_empty(spec, host, 10.0)


def power_on(spec: SiteSpec, host: Host, timeout: float = 120.0) -> None:
    """Boot a host that was powered off, with its disk (upper layer) as it was."""
    if host_running(spec, host):
        raise SiteError(f"{host.name} is running")
    _sh("ip", "link", "set", spec.veth(host), "up")
    _boot(spec, host)
    wait_ssh(spec, host, timeout)


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _wait_empty(spec: SiteSpec, host: Host, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _cgroup_pids(spec, host):
            return True
        time.sleep(0.1)
    return False


# --- destroy --------------------------------------------------------------------------


def _known_hosts(spec: SiteSpec) -> list[Host]:
    """Hosts of the site as created (site.json), else whatever is on disk by name."""
    try:
        data = json.loads((spec.work / "site.json").read_text())
        return [Host(**h) for h in data["hosts"]]
    except (OSError, ValueError, KeyError):
        pass
    names = {p.name for p in spec.work.glob(f"{spec.name}-h*")} if spec.work.exists() else set()
    names |= {p.name for p in (CGROUP_V1 / "enmesh-sites").glob(f"{spec.name}-h*")}
    names |= {
        n for n in _sh("ip", "netns", "list").stdout.split() if n.startswith(f"enm-{spec.name}-h")
    }
    hosts = []
    for found in names:
        name = found.removeprefix("enm-")
        hosts.append(Host(name, "", int(name.rsplit("-h", 1)[1])))
    return hosts


def destroy(spec: SiteSpec, timeout: float = 30.0) -> None:
    """Remove everything the site made; safe to run twice or after a failed create."""
    hosts = _known_hosts(spec)
    # A clean shutdown first (nspawn turns SIGTERM into a poweroff of the container),
    # then SIGKILL for whatever is left at the deadline.
    for host in hosts:
        pid = _nspawn_pid(spec, host)
        if pid is not None and host_running(spec, host):
            _signal(pid, signal.SIGTERM)
    for host in hosts:
        if not _wait_empty(spec, host, timeout):
            power_off(spec, host)
        for root in (CGROUP_V2, CGROUP_V1):
            base = root / spec.cgroup(host)
            for path in (
                sorted(base.rglob("*"), key=lambda p: -len(p.parts)) if base.is_dir() else []
            ):
                if path.is_dir():
                    path.rmdir()
            if base.is_dir():
                base.rmdir()
        merged = spec.work / host.name / "root"
        if _is_mount(merged):
            _sh("umount", str(merged))
        if Path(f"/sys/class/net/{spec.veth(host)}").exists():
            _sh("ip", "link", "del", spec.veth(host))
        if Path(f"/run/netns/{spec.netns(host)}").exists():
            _sh("ip", "netns", "del", spec.netns(host))
    for root in (CGROUP_V2, CGROUP_V1):
        shared = root / "enmesh-sites"
        if shared.is_dir() and not any(p.is_dir() for p in shared.iterdir()):
            shared.rmdir()
    if Path(f"/sys/class/net/{spec.bridge}").exists():
        _sh("ip", "link", "del", spec.bridge)
    # nspawn leaves empty `locks` and `propagate`: anything more is another machine's.
    if (
        (spec.work / "mounted-nspawn-run").exists()
        and _is_mount(NSPAWN_RUN)
        and not any(p.is_file() or p.is_symlink() for p in NSPAWN_RUN.rglob("*"))
    ):
        _sh("umount", str(NSPAWN_RUN))
    shutil.rmtree(spec.work, ignore_errors=True)


def leftovers(spec: SiteSpec) -> list[str]:
    """What of the site still exists on this machine (empty after destroy)."""
    found = []
    if Path(f"/sys/class/net/{spec.bridge}").exists():
        found.append(f"bridge {spec.bridge}")
    found += [f"netns {n}" for n in _sh("ip", "netns", "list").stdout.split()
              if n.startswith(f"enm-{spec.name}-")]  # fmt: skip
    found += [f"link {p.name}" for p in Path("/sys/class/net").glob(f"ve-{spec.name}-*")]
    with Path("/proc/self/mounts").open() as mounts:
        found += [f"mount {line.split()[1]}" for line in mounts if str(spec.work) in line]
    for root in (CGROUP_V1, CGROUP_V2):
        found += [f"cgroup {p}" for p in (root / "enmesh-sites").glob(f"{spec.name}-h*")]
    if spec.work.exists():
        found.append(f"directory {spec.work}")
    return found
