"""MQTT gateway benchmark, side by side with mosquitto (the reference), interleaved runs.

    .venv/bin/python benchmarks/mqtt_gateway.py [--messages N] [--runs R] [--idle N]
        [--soak SECONDS] [--mosquitto PATH] [--label X]

mosquitto is Debian's package (2.0.11), started by this script on a free loopback port
(`apt-get install mosquitto`, or `apt-get download mosquitto libmosquitto1 libdlt2` and
`dpkg -x` them, then `--mosquitto DIR/usr/sbin/mosquitto` with LD_LIBRARY_PATH set). The
gateway runs in front of one enmesh-router (compiled sample stack, SASL users).

Each figure uses the same lean raw-socket MQTT 3.1.1 clients, publisher and subscriber each
in a process of its own (all share the machine's cores with the gateway, the router and
mosquitto), 100-byte payloads:
  - throughput MQTT -> MQTT at QoS 0, 1 and 2 (publisher keeps 100 QoS 1 or 2 in flight;
    the subscriber PUBACKs each message, or at QoS 2 answers PUBREC and then PUBREL with
    PUBCOMP), msgs/s at the subscriber, and the servers' CPU per message from /proc
    (mosquitto's; the gateway's and, behind it, the router's): steadier on a shared
    machine than the rates;
  - throughput MQTT -> AMQP at QoS 0 and 1 (gateway only: mosquitto has no AMQP): the
    same publisher, an AMQP consumer (proton) on the router that accepts each message;
  - latency p50/p99 at QoS 1, publisher paced at half the gateway's QoS 1 rate;
  - idle connections: N CONNECTed clients held (the iot space's connection limit raised
    to admit them), memory per connection (gateway RSS and, for the gateway, the
    router's too: each device is an AMQP session on its user's connection);
  - soak: QoS 1 for SOAK seconds through the gateway, its RSS sampled (flat = no leak).
Figures go to benchmarks/results/mqtt_gateway.json (mqtt_gateway-X.json with --label X: a
run of other code or settings, kept beside the main one for comparison).
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proton import Delivery
from proton.handlers import MessagingHandler
from proton.reactor import Container

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.results_file import publish  # noqa: E402
from benchmarks.router_connections import roomy_model  # noqa: E402
from enmesh.router.main import raise_descriptor_limit  # noqa: E402
from tests.support.amqp import Account  # noqa: E402
from tests.support.connect_load import cpu_seconds  # noqa: E402
from tests.support.mesh import build_mesh, wait_until  # noqa: E402
from tests.support.ports import free_port, port_is_listening  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "mqtt_gateway.json"
PAYLOAD = 100
TOPIC = "telemetry"
WINDOW = 100
ROUTER = "router behind the gateway"
CPU_NAMES = ("mosquitto", "gateway", ROUTER)
IDLE_END = 5.0  # seconds without a message after which a subscriber stops counting


@dataclass(frozen=True)
class Target:
    name: str
    port: int
    publisher: tuple[str, str] | None  # (user, password); None: anonymous
    subscriber: tuple[str, str] | None
    pid: int
    behind: tuple[int, ...] = ()  # the processes it relays through (the gateway's router)
    consumer: Account | None = None  # an AMQP consumer's account on that router


# --- a minimal blocking MQTT 3.1.1 client ------------------------------------------------


def _string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">H", len(raw)) + raw


def _frame(first: int, body: bytes) -> bytes:
    length, encoded = len(body), bytearray()
    while True:
        byte, length = length & 0x7F, length >> 7
        encoded.append(byte | (0x80 if length else 0))
        if not length:
            break
    return bytes([first]) + bytes(encoded) + body


class Client:
    def __init__(self, port: int, client_id: str, credentials: tuple[str, str] | None) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = bytearray()
        flags = 0x02 | (0xC0 if credentials else 0)
        body = _string("MQTT") + bytes([4, flags]) + struct.pack(">H", 600) + _string(client_id)
        if credentials:
            body += _string(credentials[0]) + _string(credentials[1])
        self.sock.sendall(_frame(0x10, body))
        kind, packet = self.read()
        if kind >> 4 != 2 or packet[1] != 0:
            raise RuntimeError(f"CONNACK refused: {packet!r}")

    def read(self) -> tuple[int, bytes]:
        while True:
            if len(self.buffer) >= 2:
                length, shift, i = 0, 0, 1
                while i < len(self.buffer):
                    byte = self.buffer[i]
                    length |= (byte & 0x7F) << shift
                    shift += 7
                    i += 1
                    if not byte & 0x80:
                        break
                else:
                    i = -1
                if i > 0 and len(self.buffer) >= i + length:
                    first = self.buffer[0]
                    packet = bytes(self.buffer[i : i + length])
                    del self.buffer[: i + length]
                    return first, packet if first >> 4 != 3 else bytes([first]) + packet
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed by the server")
            self.buffer += chunk

    def subscribe(self, topic: str, qos: int) -> None:
        self.sock.sendall(_frame(0x82, b"\x00\x01" + _string(topic) + bytes([qos])))
        kind, packet = self.read()
        if kind >> 4 != 9 or packet[-1] >= 0x80:
            raise RuntimeError(f"SUBSCRIBE refused: {packet!r}")

    def publish(self, payload: bytes, qos: int, packet_id: int) -> bytes:
        head = _string(TOPIC) + (struct.pack(">H", packet_id) if qos else b"")
        return _frame(0x30 | qos << 1, head + payload)


def _subscriber(target: Target, qos: int, count: int, ready: Any, out: Any) -> None:
    client = Client(target.port, f"sub-{os.getpid()}", target.subscriber)
    client.subscribe(TOPIC, qos)
    ready.set()
    latencies, received, first, last = [], 0, 0.0, 0.0
    while received < count:
        client.sock.settimeout(60 if not received else IDLE_END)
        try:
            first_byte, packet = client.read()
        except TimeoutError:
            break  # QoS 0 may lose messages: count what came
        last = time.perf_counter()
        if first_byte >> 4 == 6:  # PUBREL of a QoS 2 message: PUBCOMP
            client.sock.sendall(_frame(0x70, packet[:2]))
            continue
        if first_byte >> 4 != 3:
            continue
        if not received:
            first = time.perf_counter()
        received += 1
        topic_len = struct.unpack(">H", packet[1:3])[0]
        offset = 3 + topic_len
        if (first_byte >> 1) & 3:  # PUBACK (QoS 1) or PUBREC (QoS 2)
            answer = 0x40 if (first_byte >> 1) & 3 == 1 else 0x50
            client.sock.sendall(_frame(answer, packet[offset : offset + 2]))
            offset += 2
        sent = struct.unpack(">d", packet[offset : offset + 8])[0]
        latencies.append(time.perf_counter() - sent)
    out.put((received, (last - first) if received > 1 else 0.0, latencies))
    # Leave cleanly and wait for the server's close: the gateway has then closed this
    # consumer's AMQP link, so the next run's anycast messages are not balanced to it.
    client.sock.sendall(b"\xe0\x00")
    with contextlib.suppress(OSError):
        while client.sock.recv(65536):
            pass


class _AmqpConsumer(MessagingHandler):  # type: ignore[misc]
    """MQTT -> AMQP: accepts each message and reads its send time from the bytes, decoding
    nothing (the device's payload is the message's last data section: its last bytes)."""

    def __init__(self, account: Account, count: int, ready: Any) -> None:
        super().__init__(prefetch=WINDOW, auto_accept=False)
        self.account, self.count, self.ready = account, count, ready
        self.latencies: list[float] = []
        self.first = self.last = 0.0
        self.connection: Any = None

    def on_start(self, event: Any) -> None:
        self.connection = self.account.connect(event.container)
        event.container.create_receiver(self.connection, TOPIC)
        event.container.schedule(0.5, self)

    def on_link_opened(self, event: Any) -> None:
        self.ready.set()

    def on_delivery(self, event: Any) -> None:
        delivery, link = event.delivery, event.link
        if delivery.partial or not delivery.readable:
            return
        data = link.recv(delivery.pending)
        link.advance()
        delivery.update(Delivery.ACCEPTED)
        delivery.settle()
        self.last = time.perf_counter()
        if not self.latencies:
            self.first = self.last
        stamp = data[-PAYLOAD : -PAYLOAD + 8]
        self.latencies.append(self.last - struct.unpack(">d", stamp)[0])
        if len(self.latencies) >= self.count:
            self.connection.close()

    def on_timer_task(self, event: Any) -> None:
        idle = self.latencies and time.perf_counter() - self.last > IDLE_END
        if idle:  # QoS 0 may lose messages: count what came
            self.connection.close()
        elif len(self.latencies) < self.count:
            event.container.schedule(0.5, self)


def _amqp_subscriber(target: Target, qos: int, count: int, ready: Any, out: Any) -> None:
    assert target.consumer is not None
    consumer = _AmqpConsumer(target.consumer, count, ready)
    Container(consumer).run()
    received = len(consumer.latencies)
    seconds = consumer.last - consumer.first if received > 1 else 0.0
    out.put((received, seconds, consumer.latencies))


def _publisher(target: Target, qos: int, count: int, rate: float | None) -> None:
    client = Client(target.port, f"pub-{os.getpid()}", target.publisher)
    inflight, next_id, start = 0, 1, time.perf_counter()
    for n in range(count):
        if rate:
            wait = start + n / rate - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
        while qos and inflight >= WINDOW:
            inflight -= _acknowledged(client)
        payload = struct.pack(">d", time.perf_counter()).ljust(PAYLOAD, b"x")
        client.sock.sendall(client.publish(payload, qos, next_id))
        if qos:
            inflight += 1
            next_id = next_id % 65535 + 1
    while qos and inflight:
        inflight -= _acknowledged(client)
    client.sock.sendall(b"\xe0\x00")  # DISCONNECT
    client.sock.close()


def _acknowledged(client: Client) -> int:
    """Read one packet: 1 if it ends a publish (PUBACK, or PUBCOMP at QoS 2), else 0; a
    PUBREC is answered with PUBREL."""
    kind, packet = client.read()
    if kind >> 4 == 5:
        client.sock.sendall(_frame(0x62, packet[:2]))
    return 1 if kind >> 4 in (4, 7) else 0


def flow(
    target: Target, qos: int, count: int, rate: float | None = None, *, to_amqp: bool = False
) -> dict[str, float]:
    """`count` messages from an MQTT publisher to an MQTT subscriber (`to_amqp`: to an AMQP
    consumer on the router behind the gateway)."""
    context = multiprocessing.get_context("fork")
    ready, out = context.Event(), context.Queue()
    receive = _amqp_subscriber if to_amqp else _subscriber
    sub = context.Process(target=receive, args=(target, qos, count, ready, out))
    sub.start()
    if not ready.wait(30):
        raise RuntimeError(f"{target.name}: subscriber not ready")
    servers = (target.pid, *target.behind)
    cpu_before = [cpu_seconds(pid) for pid in servers]
    pub = context.Process(target=_publisher, args=(target, qos, count, rate))
    pub.start()
    received, seconds, latencies = out.get(timeout=600)
    cpu = [cpu_seconds(pid) - before for pid, before in zip(servers, cpu_before, strict=True)]
    pub.join(60)
    sub.join(60)
    latencies.sort()
    if received < count:
        print(f"  {target.name} QoS {qos}: {count - received} of {count} messages not delivered")
    return {
        "delivered": received,
        "msgs_per_s": received / seconds if seconds else 0.0,
        "p50_ms": 1000 * latencies[len(latencies) // 2],
        "p99_ms": 1000 * latencies[int(len(latencies) * 0.99)],
        # from the publisher's start to the subscriber's last message
        "cpu_us_per_msg": 1e6 * cpu[0] / max(received, 1),
        "behind_cpu_us_per_msg": 1e6 * sum(cpu[1:]) / max(received, 1),
    }


# --- processes ---------------------------------------------------------------------------


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def start_mosquitto(binary: str, directory: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    conf = directory / "mosquitto.conf"
    conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\nmax_connections -1\n")
    process = subprocess.Popen(
        [binary, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    wait_until(lambda: port_is_listening(port), 10, "mosquitto to listen")
    return process, port


def start_gateway(router_url: str, directory: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable, "-m", "enmesh.mqtt", "--router", router_url,
            f"--listen=mqtt:127.0.0.1:{port}", "--state-dir", str(directory / "gateway"),
            "--log-level", "warning",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(directory / "gateway.log").open("wb"),
    )  # fmt: skip
    wait_until(lambda: port_is_listening(port), 20, "the gateway to listen")
    return process, port


def idle_connections(target: Target, count: int, router_pid: int | None) -> dict[str, Any]:
    """Open `count` CONNECTed clients and hold them; memory per connection."""
    before = rss_kb(target.pid)
    router_before = rss_kb(router_pid) if router_pid else 0
    held: list[Client] = []
    started = time.perf_counter()
    try:
        for i in range(count):
            held.append(Client(target.port, f"idle-{i}", target.publisher))
    except (OSError, RuntimeError) as exc:
        print(f"  {target.name}: stopped at {len(held)} connections: {exc}")
    seconds = time.perf_counter() - started
    after = rss_kb(target.pid)
    result = {
        "held": len(held),
        "connect_s": round(seconds, 2),
        "kb_per_connection": round((after - before) / max(len(held), 1), 2),
    }
    if router_pid:
        result["router_kb_per_connection"] = round(
            (rss_kb(router_pid) - router_before) / max(len(held), 1), 2
        )
    for client in held:
        client.sock.close()
    return result


def main() -> int:  # noqa: PLR0915 - one linear script of measurements
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--idle", type=int, default=10000)
    parser.add_argument("--soak", type=float, default=60.0)
    parser.add_argument("--mosquitto", default=shutil.which("mosquitto") or "/usr/sbin/mosquitto")
    parser.add_argument("--label", default="", help="write mqtt_gateway-LABEL.json instead")
    args = parser.parse_args()
    if not Path(args.mosquitto).exists():
        print(f"mosquitto not found at {args.mosquitto}: see the docstring", file=sys.stderr)
        return 2
    raise_descriptor_limit()  # thousands of idle clients
    directory = Path(tempfile.mkdtemp(prefix="mqtt-bench-"))
    model = roomy_model(directory, args.idle)
    mesh = build_mesh(directory / "mesh", routers=1, models=[model])
    mesh.start()
    processes: list[subprocess.Popen[bytes]] = []
    try:
        router = mesh.routers[0].process
        assert router is not None
        mosquitto, mosquitto_port = start_mosquitto(args.mosquitto, directory)
        gateway, gateway_port = start_gateway(mesh.url(0), directory)
        processes += [mosquitto, gateway]
        device = ("device@iot", mesh.passwords["device@iot"])
        backend = ("backend@iot", mesh.passwords["backend@iot"])
        targets = [
            Target("mosquitto", mosquitto_port, None, None, mosquitto.pid),
            Target(
                "gateway",
                gateway_port,
                device,
                backend,
                gateway.pid,
                (router.pid,),
                Account(mesh.url(0), backend[0], backend[1], "iot"),
            ),
        ]
        figures: dict[str, Any] = {"runs": args.runs, "messages": args.messages}
        if args.label:
            figures["label"] = args.label
        for qos in (0, 1, 2):
            per: dict[str, list[float]] = {t.name: [] for t in targets}
            cpu: dict[str, list[float]] = {name: [] for name in CPU_NAMES}
            lost: dict[str, int] = {t.name: 0 for t in targets}
            for run in range(args.runs):
                for target in targets:  # interleaved: mosquitto, gateway, mosquitto, ...
                    result = flow(target, qos, args.messages)
                    per[target.name].append(result["msgs_per_s"])
                    cpu[target.name].append(result["cpu_us_per_msg"])
                    if target.behind:
                        cpu[ROUTER].append(result["behind_cpu_us_per_msg"])
                    lost[target.name] += args.messages - int(result["delivered"])
                    print(
                        f"QoS {qos} run {run + 1} {target.name}: {result['msgs_per_s']:.0f} msg/s"
                    )
            medians = {name: statistics.median(v) for name, v in per.items()}
            figures[f"qos{qos}_msgs_per_s"] = {n: round(m) for n, m in medians.items()}
            figures[f"qos{qos}_not_delivered"] = lost
            figures[f"qos{qos}_cpu_us_per_msg"] = {
                name: round(statistics.median(v), 1) for name, v in cpu.items()
            }
            figures[f"qos{qos}_ratio_gateway_to_mosquitto"] = round(
                medians["gateway"] / medians["mosquitto"], 3
            )
        for qos in (0, 1):  # MQTT -> AMQP: the gateway only
            rates, cpu = [], {"gateway": [], ROUTER: []}
            for run in range(args.runs):
                result = flow(targets[1], qos, args.messages, to_amqp=True)
                rates.append(result["msgs_per_s"])
                cpu["gateway"].append(result["cpu_us_per_msg"])
                cpu[ROUTER].append(result["behind_cpu_us_per_msg"])
                print(f"QoS {qos} run {run + 1} gateway to AMQP: {result['msgs_per_s']:.0f} msg/s")
            figures[f"qos{qos}_to_amqp_msgs_per_s"] = round(statistics.median(rates))
            figures[f"qos{qos}_to_amqp_cpu_us_per_msg"] = {
                name: round(statistics.median(v), 1) for name, v in cpu.items()
            }
        half = figures["qos1_msgs_per_s"]["gateway"] / 2
        latency: dict[str, Any] = {"rate_msgs_per_s": round(half)}
        for target in targets:
            result = flow(target, 1, max(int(half * 10), 1000), rate=half)
            latency[target.name] = {k: round(result[k], 3) for k in ("p50_ms", "p99_ms")}
            print(f"latency at {half:.0f}/s {target.name}: {latency[target.name]}")
        figures["qos1_latency_at_half_load"] = latency
        figures["idle_connections"] = {
            t.name: idle_connections(t, args.idle, router.pid if t.name == "gateway" else None)
            for t in targets
        }
        print(f"idle connections: {figures['idle_connections']}")
        soak: list[tuple[float, int]] = []
        started = time.monotonic()
        while time.monotonic() - started < args.soak:
            flow(targets[1], 1, 5000)
            soak.append((round(time.monotonic() - started, 1), rss_kb(gateway.pid)))
        figures["soak_gateway_rss_kb"] = soak
        if len(soak) > 2:
            figures["soak_rss_growth_after_warmup_kb"] = soak[-1][1] - soak[1][1]
        print(f"soak (s, gateway RSS KB): {soak}")
        figures["machine"] = {"cpus": os.cpu_count()}
        suffix = f"-{args.label}" if args.label else ""
        publish(figures, RESULTS.with_name(f"mqtt_gateway{suffix}.json"))
    finally:
        for process in processes:
            process.terminate()
            process.wait(10)
        mesh.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
