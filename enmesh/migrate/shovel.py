"""`enmesh migrate move-stored`: drain every source queue into the same queue on the
target with RabbitMQ's Shovel plugin (a dynamic shovel per queue, run by the source node).

Each shovel is `src-delete-after: queue-length` (it moves what the queue held when it
started, then deletes itself) and `ack-mode: on-confirm` (a message is acknowledged on the
source only after the target confirmed it). So an interruption loses nothing: what was not
confirmed is still on the source, requeued when the shovel's connection ends. A message
confirmed by the target whose acknowledgement did not reach the source is moved twice:
at-least-once, duplicates possible, never loss.

The shovels connect as a migration user (`enmesh-migrate`, full rights on the vhost)
created on both brokers with a fresh random password at each run and deleted at the end:
the stack's own broker user may not declare queues, which an AMQP 0-9-1 shovel does.
The password reaches rabbitmqctl on stdin only (`add_user`, and the shovel definitions
through `import_definitions` from stdin), never a command line or a file.
"""

from __future__ import annotations

import json
import secrets
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlencode

from enmesh.control.brokers import Rabbitmqctl
from enmesh.deploy.secrets import replace_file
from enmesh.migrate.ends import Broker, MigrateError, StackEnd
from enmesh.migrate.expiry import first_run, read_expiries
from enmesh.migrate.plan import MigrationPlan, QueueState, depths, make_plan

MIGRATE_USER = "enmesh-migrate"
SHOVEL_PREFIX = "enmesh-migrate-"
PREFETCH = 1000
SETTLE = 15.0  # seconds for quorum queue counts to catch up after a round
ROUNDS = 5  # shovel rounds before a queue that keeps receiving is refused


@dataclass
class Moved:
    queue: str
    source_before: int
    target_before: int
    source_after: int = 0
    target_after: int = 0

    @property
    def moved(self) -> int:
        return self.source_before - self.source_after


def _uri(broker: Broker, vhost: str, password: str, ca: Path) -> str:
    query = urlencode(
        {
            "cacertfile": str(ca),
            "verify": "verify_peer",
            "server_name_indication": broker.host,
        }
    )
    auth = f"{quote(MIGRATE_USER, safe='')}:{quote(password, safe='')}"
    return f"amqps://{auth}@{broker.host}:{broker.amqps_port}/{quote(vhost, safe='')}?{query}"


def _has_user(broker: Broker) -> bool:
    users = broker.ctl.run("list_users", "--no-table-headers")
    return any(line.split("\t")[0] == MIGRATE_USER for line in users.splitlines())


def _ensure_user(broker: Broker, vhost: str, password: str) -> None:
    if _has_user(broker):
        broker.ctl.run("change_password", MIGRATE_USER, stdin=password + "\n")
    else:
        broker.ctl.run("add_user", MIGRATE_USER, stdin=password + "\n")
    broker.ctl.run("set_permissions", "-p", vhost, MIGRATE_USER, ".*", ".*", ".*")


def _shovels(ctl: Rabbitmqctl) -> dict[str, dict[str, str]]:
    """Our shovels on a node: name -> status row (state, and the reason if terminated)."""
    out = ctl.run("shovel_status", "--formatter", "json")
    rows = json.loads(out[out.index("[") :]) if "[" in out else []
    return {str(r["name"]): r for r in rows if str(r.get("name", "")).startswith(SHOVEL_PREFIX)}


def _our_parameters(broker: Broker, vhost: str) -> set[str]:
    """Names of our shovel parameters on a node: a shovel with `src-delete-after` removes
    its own when done, so "none left" means "moved" (its status row may not exist yet)."""
    out = broker.ctl.run("list_parameters", "-p", vhost, "--no-table-headers")
    names = set()
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) >= 2 and parts[0] == "shovel" and parts[1].startswith(SHOVEL_PREFIX):
            names.add(parts[1])
    return names


def _clear_leftovers(broker: Broker, vhost: str) -> list[str]:
    """A run that was interrupted left its shovels running with an old password: remove
    them (unconfirmed deliveries return to the source queue) and start afresh."""
    names = sorted(_our_parameters(broker, vhost))
    for name in names:
        broker.ctl.run("clear_parameter", "-p", vhost, "shovel", name)
    return names


@dataclass(frozen=True)
class Portion:
    """What one shovel moves from a queue: all it holds when it starts, or a run of
    messages that expire together (enmesh.migrate.expiry) with their remaining life."""

    delete_after: int | str  # a count, or "queue-length"
    expiration: str | None  # ms, for every message of the run
    last: bool  # nothing of the queue is left for another portion


def _portion(q: QueueState, source: StackEnd) -> Portion:
    ctl = source.broker(q.source_broker).ctl
    found = read_expiries(ctl, q.vhost, q.queue)
    if not found.quorum or all(e is None for e in found.expiry):
        return Portion("queue-length", None, last=True)
    if found.out_to_consumers:
        raise MigrateError(
            f"{q.vhost}/{q.queue}: {found.out_to_consumers} message(s) are out to a consumer "
            "on the source, so its messages cannot move in order of expiry; detach it "
            "(after `enmesh migrate bridge` no router of the source consumes from its brokers)"
        )
    run = first_run(found.expiry)
    expiration = None if run.expires_at is None else str(found.remaining_ms(run.expires_at))
    return Portion(run.count, expiration, last=run.count >= len(found.expiry))


@dataclass(frozen=True)
class _Move:
    """One run of move-stored: both ends, the migration user's password, the target's CA
    as the source broker reads it."""

    source: StackEnd
    target: StackEnd
    password: str
    target_ca: Path
    timeout: float
    progress: Callable[[str], None]


def _start(move: _Move, portions: dict[str, Portion], queues: list[QueueState]) -> None:
    source, target, password, target_ca = move.source, move.target, move.password, move.target_ca
    by_broker: dict[str, list[dict[str, object]]] = {}
    for q in queues:
        src = source.broker(q.source_broker)
        dst = target.broker(str(q.target_broker))
        portion = portions[q.queue]
        count = portion.delete_after
        value: dict[str, object] = {
            "src-protocol": "amqp091",
            "src-uri": _uri(src, q.vhost, password, source.ca),
            "src-queue": q.queue,
            "src-delete-after": count,
            # What it fetches beyond its count goes back to the queue, counted as delivered.
            "src-prefetch-count": min(PREFETCH, count) if isinstance(count, int) else PREFETCH,
            "dest-protocol": "amqp091",
            "dest-uri": _uri(dst, q.vhost, password, target_ca),
            "dest-queue": q.queue,
            "ack-mode": "on-confirm",
            "dest-add-forward-headers": False,
            "reconnect-delay": 1,
        }
        if portion.expiration is not None:
            value["dest-publish-properties"] = {"expiration": portion.expiration}
        by_broker.setdefault(q.source_broker, []).append(
            {
                "vhost": q.vhost,
                "component": "shovel",
                "name": SHOVEL_PREFIX + q.queue,
                "value": value,
            }
        )
    for name, items in by_broker.items():
        ctl = source.broker(name).ctl
        ctl.run("import_definitions", stdin=json.dumps({"parameters": items}))


def _wait(
    source: StackEnd, pending: list[QueueState], timeout: float, progress: Callable[[str], None]
) -> None:
    """Until every shovel deleted itself; a terminated shovel stops the step with its reason."""
    deadline = time.monotonic() + timeout
    names = {SHOVEL_PREFIX + q.queue for q in pending}
    started = time.monotonic()
    initial = sum(q.source_messages for q in pending)
    while True:
        left: set[str] = set()
        for broker in source.brokers:
            for name, row in _shovels(broker.ctl).items():
                if name in names and row.get("state") == "terminated":
                    raise MigrateError(f"shovel {name} failed: {row.get('reason', row)}")
            for vhost in {q.vhost for q in pending}:
                left |= names & _our_parameters(broker, vhost)
        current = depths(source)
        per_queue = {q.queue: current.get((q.vhost, q.queue), ("", 0))[1] for q in pending}
        remaining = sum(per_queue.values())
        elapsed = time.monotonic() - started
        rate = (initial - remaining) / elapsed if elapsed > 0 else 0.0
        eta = f", ETA {remaining / rate:.0f}s" if rate > 0 else ""
        progress(
            f"  {len(left)} shovel(s) running, {remaining} message(s) left on source "
            f"({elapsed:.0f}s, {rate:.0f} msg/s{eta}): "
            + ", ".join(f"{name} {n}" for name, n in per_queue.items())
        )
        if not left:
            return
        if time.monotonic() > deadline:
            raise MigrateError(
                f"shovels still running after {timeout:.0f}s: {', '.join(sorted(left))}; "
                "run move-stored again to resume"
            )
        time.sleep(0.2)


def move_stored(
    source: StackEnd,
    target: StackEnd,
    *,
    timeout: float = 3600.0,
    progress: Callable[[str], None] = lambda line: print(line, file=sys.stderr),
) -> list[Moved]:
    """Move every stored message; return per-queue counts. Refuses before moving anything
    if a source queue holding messages has no queue of that name on the target."""
    plan: MigrationPlan = make_plan(source, target)
    if plan.conflicts:
        raise MigrateError("the models conflict: " + "; ".join(plan.conflicts) + " (nothing moved)")
    if plan.blocked:
        raise MigrateError(
            "the target lacks queue(s) holding messages on the source: "
            + ", ".join(f"{q.vhost}/{q.queue} ({q.source_messages})" for q in plan.blocked)
            + f"; run `enmesh apply` with the source's model on {target.name!r} first"
        )
    counts = {q.queue: Moved(q.queue, q.source_messages, q.target_messages) for q in plan.queues}
    for broker in source.brokers:
        for vhost in sorted({q.vhost for q in plan.queues}):
            cleared = _clear_leftovers(broker, vhost)
            if cleared:
                progress(f"removed {len(cleared)} shovel(s) an interrupted run left running")
    pending = [q for q in plan.queues if q.source_messages]
    if pending:
        _enable_shovel(source)
        target_ca = _target_ca_for_source(source, target)
        password = secrets.token_urlsafe(24)
        vhosts = {q.vhost for q in pending}
        for broker in (*source.brokers, *target.brokers):
            for vhost in vhosts:
                _ensure_user(broker, vhost, password)
        try:
            move = _Move(source, target, password, target_ca, timeout, progress)
            _move_rounds(move, pending)
        finally:
            _drop_users(source, target)
    else:
        _drop_users(source, target)  # an interrupted run's user, its shovels done
    source_now, target_now = depths(source), depths(target)
    for moved in counts.values():
        vhost = next(q.vhost for q in plan.queues if q.queue == moved.queue)
        moved.source_after = source_now.get((vhost, moved.queue), ("", 0))[1]
        moved.target_after = target_now.get((vhost, moved.queue), ("", 0))[1]
    return list(counts.values())


def _move_rounds(move: _Move, pending: list[QueueState]) -> None:
    """Shovel every pending queue, round after round, until the source holds nothing. A
    round that moved each queue whole and still left messages means they keep arriving:
    after ROUNDS of those the step stops (a run of expiring messages is not such a round)."""
    source, target = move.source, move.target
    whole_rounds = 0
    while pending:
        portions = {q.queue: _portion(q, source) for q in pending}
        move.progress(
            f"round {whole_rounds + 1}: moving {sum(q.source_messages for q in pending)} "
            f"message(s) from {len(pending)} queue(s)"
            + "".join(
                f"; {q.queue}: {p.delete_after} expiring in {p.expiration} ms"
                for q in pending
                if (p := portions[q.queue]).expiration is not None
            )
        )
        _start(move, portions, pending)
        _wait(source, pending, move.timeout, move.progress)
        _settle(source, [q for q in pending if portions[q.queue].last])
        whole_rounds += all(p.last for p in portions.values())
        pending = [q for q in make_plan(source, target).queues if q.source_messages]
        if pending and whole_rounds >= ROUNDS:
            raise MigrateError(
                "queue(s) keep receiving messages on the source: "
                + ", ".join(q.queue for q in pending)
                + "; move their producers to the target first"
            )


def _settle(source: StackEnd, queues: list[QueueState], seconds: float = SETTLE) -> None:
    """Quorum queues publish their counts every few seconds: after the shovels are done,
    wait for the drained queues to read 0 before counting a message as still there."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        current = depths(source)
        if not any(current.get((q.vhost, q.queue), ("", 0))[1] for q in queues):
            return
        time.sleep(0.5)


def _drop_users(source: StackEnd, target: StackEnd) -> None:
    for broker in (*source.brokers, *target.brokers):
        if _has_user(broker):
            broker.ctl.run("delete_user", MIGRATE_USER)


def _target_ca_for_source(source: StackEnd, target: StackEnd) -> Path:
    """The target's CA beside the source's own, which the source's broker reads: the
    target's may be where only its deployer reads (a site's PKI directory)."""
    copy = source.ca.parent / f"migrate-{target.name}-ca.crt"
    try:
        data = target.ca.read_bytes()
    except OSError as exc:
        raise MigrateError(
            f"stack {target.name!r}: cannot read its CA {target.ca}: {exc.strerror}"
        ) from None
    if not (copy.is_file() and copy.read_bytes() == data):
        replace_file(copy, data, mode=0o644)
    return copy


def _enable_shovel(source: StackEnd) -> None:
    for broker in source.brokers:
        broker.ctl.sibling("rabbitmq-plugins").run("enable", "rabbitmq_shovel")


def report(moved: list[Moved]) -> str:
    lines = [f"{'queue':24} {'before':>8} {'moved':>8} {'after':>8} {'target':>8}"]
    for m in moved:
        lines.append(
            f"{m.queue:24} {m.source_before:>8} {m.moved:>8} {m.source_after:>8} "
            f"{m.target_after:>8}"
        )
    lines.append(f"moved {sum(m.moved for m in moved)} message(s)")
    return "\n".join(lines)
