"""RabbitMQ through `rabbitmqctl`: read what a broker holds, change it to the plan.

Why `rabbitmqctl` and not the HTTP API: the stack does not enable the management plugin
(one more listener, its own users and TLS to keep), while the CLI is on every broker host
and talks to the node over Erlang distribution on loopback. `export_definitions` reads the
running state, `import_definitions` adds and updates (it never deletes), `list_queues`
gives depths, and deletions are one command each: `delete_queue` (unless forced, after the
depth is read again: a message that arrived since the plan stops it), `clear_policy`,
`clear_parameter`, `clear_permissions`, `delete_vhost`; exchanges and bindings, which 3.10's
CLI cannot delete, through `rabbitmqctl eval` of the same internal calls the HTTP API makes.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from enmesh.control.plan import BrokerPlan, Definitions, QueueName

ACTING_USER = "enmesh-apply"
TIMEOUT = 120.0


class BrokerError(RuntimeError):
    """A broker refused a command; the message names the broker and the command."""


@dataclass(frozen=True)
class Rabbitmqctl:
    """How to run `rabbitmqctl` against one broker node."""

    name: str  # the broker's name in the stack
    argv: tuple[str, ...]  # e.g. ("/usr/sbin/rabbitmqctl", "--node", "rabbit@localhost")
    env: Mapping[str, str] | None = field(default=None, repr=False)
    # A command that runs one shell command on the broker's host, e.g. ("ssh", "root@h0"):
    # `argv` then runs there, every word quoted for that host's shell.
    via: tuple[str, ...] = ()

    def command(self, *args: str) -> list[str]:
        """The command line that runs `rabbitmqctl -q ARGS` (quiet: no banners)."""
        words = [*self.argv, "-q", *args]
        return [*self.via, shlex.join(words)] if self.via else words

    def sibling(self, tool: str) -> Rabbitmqctl:
        """Another RabbitMQ CLI tool (`rabbitmq-plugins`) beside this one, same node."""
        path = str(PurePosixPath(self.argv[0]).with_name(tool))
        return Rabbitmqctl(self.name, (path, *self.argv[1:]), self.env, self.via)

    def run(self, *args: str, stdin: str = "") -> str:
        """Its output; BrokerError naming the command (never `stdin`, which may hold a
        password) if it fails."""
        try:
            result = subprocess.run(
                self.command(*args),
                input=stdin,
                capture_output=True,
                text=True,
                env=dict(self.env) if self.env is not None else None,
                timeout=TIMEOUT,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise BrokerError(f"broker {self.name}: rabbitmqctl {args[0]} timed out") from None
        if result.returncode != 0:
            output = (result.stderr + result.stdout).strip()
            raise BrokerError(
                f"broker {self.name}: rabbitmqctl {' '.join(args)} failed "
                f"({result.returncode}): {output}"
            )
        return result.stdout


def export_definitions(ctl: Rabbitmqctl) -> dict[str, Any]:
    text = ctl.run("export_definitions", "-", "--format", "json")
    return dict(json.loads(text[text.index("{") :]))


def queue_depths(ctl: Rabbitmqctl, vhosts: Iterable[str]) -> dict[QueueName, int]:
    """(vhost, queue) -> messages ready and unacknowledged."""
    depths: dict[QueueName, int] = {}
    for vhost in sorted(set(vhosts)):
        try:
            out = ctl.run("list_queues", "-p", vhost, "--no-table-headers", "name", "messages")
        except BrokerError as exc:
            if "no_such_vhost" in str(exc) or "does not exist" in str(exc):
                continue  # a vhost this apply creates
            raise
        for line in out.splitlines():
            name, _, messages = line.rpartition("\t")
            if name and messages.strip().isdigit():
                depths[(vhost, name)] = int(messages)
    return depths


def _erlang_binary(text: str) -> str:
    return "<<" + json.dumps(text) + "/utf8>>"


def _resource(vhost: str, kind: str, name: str) -> str:
    return f"rabbit_misc:r({_erlang_binary(vhost)}, {kind}, {_erlang_binary(name)})"


def _delete_exchange(ctl: Rabbitmqctl, item: Mapping[str, Any]) -> None:
    resource = _resource(str(item["vhost"]), "exchange", str(item["name"]))
    ctl.run("eval", f"rabbit_exchange:delete({resource}, false, {_erlang_binary(ACTING_USER)}).")


def _delete_binding(ctl: Rabbitmqctl, item: Mapping[str, Any]) -> None:
    vhost = str(item["vhost"])
    source = _resource(vhost, "exchange", str(item["source"]))
    destination = _resource(vhost, str(item["destination_type"]), str(item["destination"]))
    key = _erlang_binary(str(item.get("routing_key", "")))
    binding = f"{{binding, {source}, {key}, {destination}, []}}"
    call = f"rabbit_binding:remove({binding}, fun (_, _) -> ok end, {_erlang_binary(ACTING_USER)})."
    ctl.run("eval", call)


def _delete_queue(ctl: Rabbitmqctl, item: Mapping[str, Any], forced: bool) -> None:
    """Quorum queues refuse `delete_queue --if-empty` (and rabbitmqctl still exits 0), so
    the depth is read again just before the delete: a message that arrived since the plan
    stops it, unless forced."""
    vhost, name = str(item["vhost"]), str(item["name"])
    if not forced:
        messages = queue_depths(ctl, [vhost]).get((vhost, name), 0)
        if messages:
            raise BrokerError(
                f"broker {ctl.name}: queue {name} received {messages} message(s) since the "
                f"plan; not deleted (apply again, or with --force {name})"
            )
    out = ctl.run("delete_queue", "-p", vhost, name)
    if "error" in out.lower():
        raise BrokerError(f"broker {ctl.name}: delete_queue {name} failed: {out.strip()}")


def add_and_update(
    ctl: Rabbitmqctl, plan: BrokerPlan, desired: Definitions, forced: set[QueueName]
) -> None:
    """Replace the queues whose arguments changed, then import what the plan adds or changes."""
    for queue in plan.replace_queues:
        name = (str(queue["vhost"]), str(queue["name"]))
        _delete_queue(ctl, queue, name in forced)
    if not plan.imports:
        return
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="enmesh-apply-") as handle:
        json.dump(desired, handle)
        handle.flush()
        # Debian's rabbitmqctl run as root re-runs itself as `rabbitmq`, which reads the
        # file; compiled definitions hold no secret (users are created from theirs).
        Path(handle.name).chmod(0o644)
        ctl.run("import_definitions", handle.name)


def remove(ctl: Rabbitmqctl, plan: BrokerPlan, forced: set[QueueName]) -> None:
    """Delete what the plan removes: bindings and queues first, vhosts last."""
    removals = plan.removals
    for item in removals.get("bindings", []):
        _delete_binding(ctl, item)
    for item in removals.get("queues", []):
        _delete_queue(ctl, item, (str(item["vhost"]), str(item["name"])) in forced)
    for item in removals.get("exchanges", []):
        _delete_exchange(ctl, item)
    for item in removals.get("policies", []):
        ctl.run("clear_policy", "-p", str(item["vhost"]), str(item["name"]))
    for item in removals.get("parameters", []):
        ctl.run(
            "clear_parameter", "-p", str(item["vhost"]), str(item["component"]), str(item["name"])
        )
    for item in removals.get("permissions", []):
        ctl.run("clear_permissions", "-p", str(item["vhost"]), str(item["user"]))
    for item in removals.get("vhosts", []):
        ctl.run("delete_vhost", str(item["name"]))
