"""Write (or check) docs/performance.md from benchmarks/results/*.json.

.venv/bin/python scripts/results_docs.py            # rewrite docs/performance.md
.venv/bin/python scripts/results_docs.py --check    # exit 1 if it is not current

Every figure on that page is read from a results file, next to the command that wrote
it, so the page cannot drift from the measurements: a benchmark run that writes new
results is followed by this script (a unit test fails until it is).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PAGE = ROOT / "docs" / "performance.md"
PY = ".venv/bin/python"


@dataclass(frozen=True)
class Bench:
    file: str  # under benchmarks/results/
    title: str
    command: str  # the command that writes `file` (a file's own "command" field wins)
    about: str
    table: Callable[[dict[str, Any]], Iterator[tuple[str, ...]]]


def _get(data: dict[str, Any], path: str) -> Any:
    for key in path.split("."):
        data = data[key]
    return data


def _pairs(*rows: tuple[str, str, str]) -> Callable[[dict[str, Any]], Iterator[tuple[str, ...]]]:
    """A table of (figure, value) rows; each value is `format` applied to a JSON path."""

    def table(data: dict[str, Any]) -> Iterator[tuple[str, ...]]:
        yield ("figure", "value")
        for label, path, fmt in rows:
            value = _get(data, path)
            values = value if isinstance(value, list) else [value]
            yield (label, " / ".join(fmt.format(v) for v in values))

    return table


_MQTT_LAT, _MQTT_IDLE = "qos1_latency_at_half_load", "idle_connections.gateway"


_WAYS_IN = (
    ("grant_each_time", "PLAIN/TLS, Keycloak password grant each time"),
    ("remembered", "PLAIN/TLS, remembered logins"),
    ("scram_keycloak", "SCRAM-SHA-256, keys from Keycloak"),
    ("sasldb", "SCRAM-SHA-256, router's sasldb"),
)


def _keycloak(data: dict[str, Any]) -> Iterator[tuple[str, ...]]:
    yield ("way in", "alone p50", "loaded", "loaded p50 / p99",
           "CPU ms per connection: router / enmesh-auth / Keycloak", "clients' CPU")  # fmt: skip
    for key, label in _WAYS_IN:
        run = data[key]
        cpu = [
            run.get(f"cpu_ms_per_connection_{who}") for who in ("router", "enmesh_auth", "keycloak")
        ]
        yield (
            label,
            f"{run['sequential_p50_ms']} ms",
            f"{run['loaded_per_s']}/s",
            f"{run['loaded_p50_ms']} / {run['loaded_p99_ms']} ms",
            " / ".join("-" if value is None else str(value) for value in cpu),
            f"{run['loaded_client_cpu_ms_per_connection']} ms",
        )


_CONNECTION_COLUMNS = (
    ("held", "held", "{:,}"), ("failed", "failed", "{}"), ("router RSS", "router_rss_mb", "{} MB"),
    ("per idle connection", "kb_per_idle_connection", "{} KB"),
    ("router CPU per login", "router_cpu_ms_per_login", "{} ms"),
    ("router CPU while idle", "router_idle_cpu_percent", "{} %"),
    ("new client's round trip", "new_client_round_trip_ms", "{} ms"),
)  # fmt: skip


_WAYS_TO_CONNECT = (("scram_sha_256", "SCRAM-SHA-256 (plain port)"),
                    ("plain_over_tls", "PLAIN inside TLS"))  # fmt: skip


def _engines(data: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """enmesh-router's figures, then the reference router's when the run had one."""
    yield "enmesh-router", data
    if "reference" in data:
        yield data["reference"]["label"], data["reference"]


def _set_up(data: dict[str, Any]) -> Iterator[tuple[str, ...]]:
    yield ("router", "way in", "connections/s", "router CPU per connection")
    for engine, figures in _engines(data):
        for key, label in _WAYS_TO_CONNECT:
            way = figures["set_up"][key]
            yield engine, label, f"{way['per_s']}/s", f"{way['router_cpu_ms_per_connection']} ms"


def _connections(data: dict[str, Any]) -> Iterator[tuple[str, ...]]:
    yield ("router", *(header for header, _, _ in _CONNECTION_COLUMNS))
    for engine, figures in _engines(data):
        for step in figures["steps"]:
            yield engine, *(fmt.format(step[key]) for _, key, fmt in _CONNECTION_COLUMNS)


def _sessions(data: dict[str, Any]) -> Iterator[tuple[str, ...]]:
    yield ("router", "CPU per session opened", "CPU per session ended", "KB left per ended session")
    for engine, figures in _engines(data):
        yield (
            engine,
            f"{figures['router_cpu_us_per_session_opened']} µs",
            f"{figures['router_cpu_us_per_session_ended']} µs",
            f"{figures['router_kb_left_per_ended_session']}",
        )


def _pipeline(data: dict[str, Any]) -> Iterator[tuple[str, ...]]:
    yield ("input", "devices", "sustained", "p50", "p99", "p99 queued", "p99 in Spark")
    for run in data["mesh"]:
        yield (
            f"mesh, {run['rate']:g} readings/s for {run['seconds']:g} s",
            str(run["devices"]),
            f"{run['events_per_s']:g} events/s",
            f"{run['p50_s']:.2f} s",
            f"{run['p99_s']:.2f} s",
            f"{run['queued']['p99_s']:.2f} s",
            f"{run['in_spark']['p99_s']:.2f} s",
        )
    ceiling = data["files_ceiling"]
    yield (
        f"files (ceiling), {ceiling['readings']} readings",
        "",
        f"{ceiling['steady_events_per_s']:g} events/s steady",
        f"{ceiling['steady_batch_seconds']:.2f} s per batch",
        "",
        "",
        "",
    )


def _router(data: dict[str, Any]) -> Iterator[tuple[str, ...]]:
    yield ("path", "unsettled msg/s", "presettled msg/s", "p50 / p99 at half load")
    paths = {
        "a_no_router": "(a) proton → proton, no router",
        "b_one_router": "(b) through 1 router",
        "c_three_routers": "(c) across 3 routers",
        "d_rabbitmq_queue": "(d) RabbitMQ AMQP 1.0 queue (TLS)",
    }
    for key, label in paths.items():
        path = data[key]
        half = path.get("half_load")
        latency = f"{half['p50_ms']:.1f} / {half['p99_ms']:.1f} ms" if half else "—"
        unsettled, presettled = path["unsettled"]["msgs_per_s"], path["presettled"]["msgs_per_s"]
        yield (label, f"{unsettled:,}", f"{presettled:,}", latency)
        if "parallel" in path:  # the clients' ceiling: several pairs at once
            pairs = path["parallel"]
            yield (f"(a) {pairs['pairs']} such pairs at once", f"{pairs['msgs_per_s']:,}", "—", "—")


def _side_by_side(data: dict[str, Any]) -> Iterator[tuple[str, ...]]:
    """enmesh-router against the reference router of `--reference-router` (medians)."""
    yield ("figure (median of the rounds)", "enmesh-router", "reference", "ratio")
    runs = data.get("side_by_side")
    if runs is None:
        yield ("not measured: run with --reference-router PATH", "—", "—", "—")
        return
    ours, theirs = runs["medians"]["enmesh-router"], runs["medians"][runs["label"]]
    ratios = runs["ratios_enmesh_over_reference"]
    for key, label in (
        ("one_hop_msgs_per_s", "one hop, unsettled msg/s"),
        ("three_hops_msgs_per_s", "three hops, unsettled msg/s"),
        ("one_hop_router_cpu_us_per_msg", "router CPU µs per message, one hop"),
        ("three_hops_router_cpu_us_per_msg", "routers' CPU µs per message, three hops"),
        ("paced_p50_ms", "p50 ms at the paced rate, one hop"),
        ("paced_p99_ms", "p99 ms at the paced rate, one hop"),
        ("paced_router_cpu_us_per_msg", "routers' CPU µs per message at the paced rate"),
    ):
        if key not in ours:
            continue  # a run from before the paced rate's CPU was measured
        shown = "{:,.0f}" if key.endswith("msgs_per_s") else "{:,}"
        yield (label, shown.format(ours[key]), shown.format(theirs[key]), f"{ratios.get(key, '—')}")


_LARGE = _pairs(
    ("1 MB messages", "throughput_1mb.messages_per_s", "{} msg/s"),
    ("left with the producer, stalled 50 MB (MB)", "stalled_receiver.left_with_producer_mb", "{}"),
    ("RSS growth per router, stalled 50 MB (MB)",
     "stalled_receiver.rss_growth_mb_per_router", "{}"),
)  # fmt: skip

BENCHES = (
    Bench(
        "compile_scale.json", "Compiler", f"{PY} benchmarks/compile_scale.py",
        "10,000 addresses in 100 spaces, 3 routers, 3 brokers: load, validate and compile.",
        _pairs(
            ("addresses", "addresses", "{:,}"), ("total", "total_s", "{} s"),
            ("target", "target_total_s", "< {} s"), ("peak RSS", "peak_rss_mb", "{} MB"),
            ("target RSS", "target_peak_rss_mb", "< {} MB"),
        ),
    ),
    Bench(
        "apply_scale.json", "Live apply", f"{PY} benchmarks/apply_scale.py",
        "A 3-router mesh and RabbitMQ with 1,000 client connections open and traffic "
        "through them; from `enmesh apply` starting to the first message through a new "
        "address (targets < 2 s for 1, < 20 s for 1,000; no connection dropped).",
        _pairs(
            ("1 new address: first message after", "one.seconds_to_first_message", "{} s"),
            ("1,000 new addresses: first message after",
             "thousand.seconds_to_first_message", "{} s"),
            ("connections open", "load.opened", "{:,}"),
            ("deliveries through them", "load.accepted", "{:,}"),
            ("connections dropped", "connections_dropped", "{}"),
        ),
    ),
    Bench(
        "console_render.json", "Console", f"{PY} benchmarks/console_render.py",
        "The page of an address space with 1,000 addresses, over HTTPS through a real "
        "router's management, measured from the client (target < 500 ms).",
        _pairs(
            ("addresses", "addresses", "{:,}"), ("median", "median_ms", "{} ms"),
            ("p95", "p95_ms", "{} ms"), ("max", "max_ms", "{} ms"),
            ("target", "target_ms", "< {} ms"),
        ),
    ),
    Bench(
        "stack_up.json", "Local stack", f"{PY} benchmarks/stack_up.py",
        "Cold `make up` after removing what the stack installed, warm `make up` (must "
        "change nothing), and the resident memory of every supervised program. Not part "
        "of `make bench`: it tears the running stack down.",
        _pairs(
            ("cold make up", "cold_make_up_s", "{} s"), ("warm make up", "warm_make_up_s", "{} s"),
            ("warm target", "targets.warm_make_up_s", "< {} s"),
            ("changes, cold", "cold_changes", "{}"), ("changes, warm", "warm_changes", "{}"),
            ("stack RSS", "stack_rss_mb", "{} MB"),
            ("RSS target", "targets.stack_rss_mb", "< {} MB"),
        ),
    ),
    Bench(
        "router_throughput.json", "Router throughput",
        f"{PY} benchmarks/router_throughput.py --messages 20000 --connections 1000",
        "100-byte messages, sender and receiver each in their own process, on the same "
        "2 cores. Targets: (b) at least 50 % of (a) and twice (d), p99 at half load < 5 ms. "
        "(b)'s router runs under cProfile (its profile is in the results file); the side "
        "by side below runs unprofiled. Compare paths within one run: this VM's speed has "
        "varied several-fold between days, and (a), the clients alone, is measured in the "
        "same run.",
        _router,
    ),
    Bench(
        "router_throughput.json", "Router side by side with qdrouterd",
        f"{PY} benchmarks/router_throughput.py --reference-router PATH",
        "The same run's compiled configs under enmesh-router and under a qdrouterd 1.19 built "
        "here (`--reference-router`), in turns, with the same clients: 100-byte messages, "
        "the routers' CPU from /proc, latency at a paced 1,000 msg/s. Producer and consumer "
        "of one hop are both on the chain's last router, as is the consumer of three hops. "
        "Where a router's msg/s comes close to (a) above, the clients are the limit, and "
        "the CPU per message is the fairer figure.",
        _side_by_side,
    ),
    Bench(
        "router_throughput.json", "Router memory and connections",
        f"{PY} benchmarks/router_throughput.py --messages 20000 --connections 1000",
        "The same run: SCRAM-authenticated connections held open while the router serves, "
        "and what an idle connection and an address with a consumer cost.",
        _pairs(
            ("connections opened", "connections.opened", "{:,}"),
            ("seconds to open them", "connections.seconds_to_open", "{}"),
            ("per idle authenticated connection", "connections.kb_per_idle_connection", "{} KB"),
            ("per address with a consumer", "memory_per_address.kb_per_address", "{} KB"),
        ),
    ),
    Bench(
        "router_connections.json", "Router: connection set-up",
        f"{PY} benchmarks/router_connections.py --connections 10000 --steps 4"
        " --reference-router PATH",
        "1,000 connections opened and closed at once by 2 client processes with 8 handshakes "
        "each in flight, against one router and its sasldb; the router's CPU per connection "
        "from /proc says what one router core admits. With `--reference-router`, the same "
        "config, sasldb and clients then go through that router (qdrouterd 1.19 built here).",
        _set_up,
    ),
    Bench(
        "router_connections.json", "Router: 10,000 concurrent connections",
        f"{PY} benchmarks/router_connections.py --connections 10000 --steps 4"
        " --reference-router PATH",
        "Idle connections logged in with SCRAM-SHA-256 (the router's sasldb) held on one "
        "router, opened 200 handshakes at a time by one client process; at each step the "
        "router's RSS, its CPU while it only keeps them (10 s; heartbeats), and a new "
        "client's message round trip through it; then the same through the reference router "
        "when one was given (qdrouterd's memory per idle connection is issue 28's anchor).",
        _connections,
    ),
    Bench(
        "router_sessions.json", "Router: sessions on one connection",
        f"{PY} benchmarks/router_sessions.py --sessions 2000 --reference-router PATH",
        "One client connection opens 2,000 sessions, each with a receiver and a sender (the "
        "MQTT gateway's devices on their user's connection), then ends them one after "
        "another; the second of two rounds is measured. The router's CPU from /proc; its "
        "RSS after the round against before it.",
        _sessions,
    ),
    Bench(
        "router_soak.json", "Router soak", f"{PY} benchmarks/router_soak.py --messages 10000000",
        "Anycast, multicast and a queue at once through a 3-router mesh and RabbitMQ; each "
        "router's RSS sampled every 100,000 messages (target: < 5 MB growth after warm-up).",
        _pairs(
            ("messages", "messages_sent", "{:,}"), ("seconds", "seconds", "{:,}"),
            ("rate", "msgs_per_s", "{:,} msg/s"),
            ("RSS growth after warm-up per router (KB)", "max_growth_after_warm_up_kb", "{}"),
            ("target met", "target_met", "{}"),
        ),
    ),
    Bench(
        "router_wills.json", "Router wills churn",
        f"{PY} benchmarks/router_wills.py --cycles 6000 --sample-every 500",
        "Client lives on router 0 of a 2-router mesh, each registering a will on `$lwt`, "
        "half cancelling it (detach), half leaving it (connection closed) for a consumer on "
        "router 1; router 0's RSS sampled (target: < 5 MB growth after warm-up).",
        _pairs(
            ("client lives", "cycles", "{:,}"), ("rate", "cycles_per_second", "{:,} /s"),
            ("wills published", "wills_published", "{:,}"),
            ("wills received by the consumer", "wills_received", "{:,}"),
            ("left in the will store", "wills_left_in_store", "{}"),
            ("RSS growth after warm-up (KB)", "rss_growth_after_warm_up_kb", "{}"),
        ),
    ),
    Bench(
        "router_fuzz.json", "Router fuzz", f"{PY} benchmarks/router_fuzz.py --seconds 300",
        "Random bytes, invalid UTF-8, fields of the wrong type, mutated sessions and random "
        "performatives against one router.",
        _pairs(
            ("connections", "connections", "{:,}"),
            ("tracebacks in the log", "tracebacks_in_log", "{}"),
            ("router serves after", "router_serves_after", "{}"),
            ("RSS change", "rss_change_percent", "{} %"),
        ),
    ),
    Bench(
        "router_large-unbounded.json", "Large messages",
        f"{PY} benchmarks/router_large.py --label unbounded",
        "1 MB messages through a 3-router chain, and a consumer that stalls inside a 50 MB "
        "message (what each router on the path holds meanwhile); session windows unbounded "
        "(maxSessionFrames unset, the default).",
        _LARGE,
    ),
    Bench(
        "router_large.json", "Large messages, bounded session windows",
        f"{PY} benchmarks/router_large.py --session-frames 128",
        "The same with maxSessionFrames 128 on every listener and connector: the hold-off "
        "reaches the producer.",
        _LARGE,
    ),
    Bench(
        "mqtt_gateway.json", "MQTT gateway, side by side with mosquitto",
        f"{PY} benchmarks/mqtt_gateway.py --mosquitto PATH",
        "Raw-socket MQTT 3.1.1 clients (QoS 0, 1, 2) through the gateway and one "
        "enmesh-router (anycast, end to end), and through Debian's mosquitto 2.0.11, "
        "interleaved runs, medians; the same publisher to an AMQP consumer on the router "
        "(gateway only); then latency at half the gateway's QoS 1 rate, idle connections "
        "held and a 60 s QoS 1 soak. Analysis: [MQTT gateway](mqtt.md#measured).",
        _pairs(
            ("QoS 0 msg/s, mosquitto", "qos0_msgs_per_s.mosquitto", "{}"),
            ("QoS 0 msg/s, gateway", "qos0_msgs_per_s.gateway", "{}"),
            ("QoS 0 gateway / mosquitto", "qos0_ratio_gateway_to_mosquitto", "{}"),
            ("QoS 1 msg/s, mosquitto", "qos1_msgs_per_s.mosquitto", "{}"),
            ("QoS 1 msg/s, gateway", "qos1_msgs_per_s.gateway", "{}"),
            ("QoS 1 not delivered of 60,000, mosquitto", "qos1_not_delivered.mosquitto", "{}"),
            ("QoS 1 not delivered of 60,000, gateway", "qos1_not_delivered.gateway", "{}"),
            ("QoS 1 gateway / mosquitto", "qos1_ratio_gateway_to_mosquitto", "{}"),
            ("QoS 2 msg/s, mosquitto", "qos2_msgs_per_s.mosquitto", "{}"),
            ("QoS 2 msg/s, gateway", "qos2_msgs_per_s.gateway", "{}"),
            ("QoS 2 not delivered of 60,000, gateway", "qos2_not_delivered.gateway", "{}"),
            ("QoS 2 gateway / mosquitto", "qos2_ratio_gateway_to_mosquitto", "{}"),
            ("QoS 0 msg/s MQTT -> AMQP consumer, gateway", "qos0_to_amqp_msgs_per_s", "{}"),
            ("QoS 1 msg/s MQTT -> AMQP consumer, gateway", "qos1_to_amqp_msgs_per_s", "{}"),
            ("QoS 1 p99 ms at half load, mosquitto", f"{_MQTT_LAT}.mosquitto.p99_ms", "{}"),
            ("QoS 1 p99 ms at half load, gateway", f"{_MQTT_LAT}.gateway.p99_ms", "{}"),
            ("idle connections held, gateway", "idle_connections.gateway.held", "{}"),
            ("KB per connection, gateway", "idle_connections.gateway.kb_per_connection", "{}"),
            ("KB per connection in the router", f"{_MQTT_IDLE}.router_kb_per_connection", "{}"),
            ("KB per connection, mosquitto", "idle_connections.mosquitto.kb_per_connection", "{}"),
            ("soak RSS growth after warm-up, KB", "soak_rss_growth_after_warmup_kb", "{}"),
        ),
    ),
    Bench(
        "mqtt_gateway-soak300.json", "MQTT gateway soak",
        f"{PY} benchmarks/mqtt_gateway.py --mosquitto PATH --runs 1 --idle 10 --soak 300"
        " --label soak300",
        "The same script with one run of each figure, 10 idle devices and 300 s of QoS 1 "
        "flows of 5,000 messages, each with a new publisher and subscriber: the gateway's "
        "RSS after every flow (the 60 s soak above starts right after 10,000 idle devices "
        "closed).",
        _pairs(
            ("QoS 1 msg/s, gateway", "qos1_msgs_per_s.gateway", "{}"),
            ("QoS 1 p99 ms at half load, gateway", f"{_MQTT_LAT}.gateway.p99_ms", "{}"),
            ("soak RSS growth after the first flow, KB", "soak_rss_growth_after_warmup_kb", "{}"),
        ),
    ),
    Bench(
        "mqtt_half_open.json", "MQTT gateway, half-open sockets",
        f"{PY} benchmarks/mqtt_half_open.py",
        "Rounds of 10,000 sockets that connect and send nothing: the gateway closes each "
        "after its 10 s CONNECT timeout and still answers a CONNECT afterwards. Its RSS "
        "stays at CPython's high-water mark, without growth from round to round.",
        _pairs(
            ("sockets per round", "sockets", "{}"),
            ("gateway RSS before, KB", "baseline_kb", "{}"),
            ("closed by the gateway, per round", "rounds", "{0[closed_by_gateway]}"),
            ("RSS after each round, KB", "rounds", "{0[after_kb]}"),
            ("a CONNECT afterwards (CONNACK bytes)", "connect_after", "{}"),
        ),
    ),
    Bench(
        "pipeline.json", "Telemetry pipeline", f"{PY} benchmarks/pipeline.py",
        "Readings through the mesh into the deployed Spark job (local stack), latency from "
        "a reading's stamp to the Parquet file holding it; Spark over the same readings "
        "from files is the ceiling. Target: keep up with the mesh, p99 < 3 s. History "
        "and analysis: [pipeline performance](pipeline-performance.md).",
        _pipeline,
    ),
    Bench(
        "pipeline-r700-s30-d200.json", "Telemetry pipeline, 200 devices",
        f"{PY} benchmarks/pipeline.py --rates 700 --devices 200", "", _pipeline,
    ),
    Bench(
        "pipeline-r700-s30-d1000.json", "Telemetry pipeline, 1000 devices",
        f"{PY} benchmarks/pipeline.py --rates 700 --devices 1000", "", _pipeline,
    ),
    Bench(
        "migrate_whole.json", "A whole migration",
        f"{PY} benchmarks/migrate_whole.py --count 100000",
        "`enmesh migrate`'s steps between two stacks on this host (one router and one "
        "RabbitMQ node each), the sample model with 100,000 stored 1 KB messages.",
        _pairs(
            ("stored messages moved", "messages", "{:,}"),
            ("plan", "seconds.plan", "{} s"),
            ("prepare (model and passwords, applied live)", "seconds.prepare", "{} s"),
            ("bridge", "seconds.bridge", "{} s"),
            ("move-stored", "seconds.move-stored", "{} s"),
            ("finish's check", "seconds.finish (the source checked empty)", "{} s"),
            ("total", "total_seconds", "{} s"),
        ),
    ),
    Bench(
        "keycloak_auth.json", "Keycloak in the authentication path",
        f"{PY} benchmarks/keycloak_auth.py --connections 400 --rounds 3",
        "Authenticated connections through one enmesh-router: PLAIN over TLS with enmesh-auth "
        "asking Keycloak for a password grant every time, or remembering logins (then one "
        "read of the user's state from enmesh's provider), SCRAM-SHA-256 with the keys from "
        "that provider, and the router's own sasldb (SCRAM-SHA-256). One at a time, then "
        "loaded by 2 client processes with 8 handshakes each in flight; CPU per connection "
        "of each server process from /proc. Interleaved rounds, medians (target: 200 "
        "connections/s per router; see Identity and access for what limits it).",
        _keycloak,
    ),
    Bench(
        "keycloak_auth.json", "Keycloak's footprint",
        f"{PY} benchmarks/keycloak_auth.py --connections 400 --rounds 3",
        "The same run: Keycloak's start on a fresh PostgreSQL database and its JVM's memory.",
        _pairs(
            ("Keycloak start (fresh database)", "keycloak_start_s", "{} s"),
            ("Keycloak RSS after start", "keycloak_rss_mb_started", "{} MB"),
            ("Keycloak RSS after the logins", "keycloak_rss_mb_after", "{} MB"),
        ),
    ),
)  # fmt: skip


def _markdown(rows: Iterator[tuple[str, ...]]) -> list[str]:
    header = next(rows)
    lines = [f"| {' | '.join(header)} |", f"| {' | '.join('---' for _ in header)} |"]
    lines += [f"| {' | '.join(row)} |" for row in rows]
    return lines


def page() -> str:
    lines = [
        "# Performance",
        "",
        "<!-- generated by scripts/results_docs.py from benchmarks/results/; do not edit -->",
        "Every figure here is read from `benchmarks/results/` and shown with the command that",
        "wrote it; `scripts/results_docs.py` regenerates this page after a run (a unit test",
        "fails while it is stale). All runs are on a 2-core VM shared with other work, so",
        "figures vary by about ±15 % from run to run. `make bench` runs the compiler and",
        "router benchmarks; the others need the local stack (`make up`).",
    ]
    for bench in BENCHES:
        data = json.loads((RESULTS / bench.file).read_text(encoding="utf-8"))
        command = data.get("command")
        command = f"{PY} {command}" if command else bench.command
        lines += ["", f"## {bench.title}", ""]
        if bench.about:
            lines += [bench.about, ""]
        lines += [f"`{command}` → `benchmarks/results/{bench.file}`", ""]
        lines += _markdown(bench.table(data))
    return "\n".join(lines) + "\n"


def main() -> int:
    text = page()
    if "--check" in sys.argv:
        if PAGE.read_text(encoding="utf-8") != text:
            print(f"{PAGE} is not current: run scripts/results_docs.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text, encoding="utf-8")
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
