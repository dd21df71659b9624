"""Ansible's default output, except that a wait is not shown as a failure.

Tasks that wait for something to come up (`until:` with `retries:`: the broker booting,
a router reaching its peers, the Spark worker registering) print `FAILED - RETRYING` on
every try with the default callback, which reads like an error to anyone watching
`make up`. This prints `waiting: [host]: task (try N of M)` on the first try and every
tenth after it, and nothing else changes. ansible.cfg selects it
(`stdout_callback = enmesh`).

With `ENMESH_TASK_TIMES=N` in the environment, the run ends with its N slowest tasks (a
task's time runs from its start to the next task's, over all hosts and serial batches):
where a long run spent its time, without ansible.posix's profile_tasks.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from typing import Any

from ansible.plugins.callback.default import CallbackModule as DefaultCallback

DOCUMENTATION = """
    name: enmesh
    type: stdout
    short_description: the default output, with waits shown as waits
    description: Ansible's default stdout callback; retries of an until loop print "waiting".
    extends_documentation_fragment: default_callback
"""
SHOW_EVERY = 10  # tries between two "waiting" lines of the same task


class CallbackModule(DefaultCallback):  # type: ignore[misc]
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "enmesh"

    def __init__(self) -> None:
        super().__init__()
        self._task_seconds: defaultdict[str, float] = defaultdict(float)
        self._current: tuple[str, float] | None = None

    def _task_begins(self, name: str | None) -> None:
        now = time.monotonic()
        if self._current is not None:
            self._task_seconds[self._current[0]] += now - self._current[1]
        self._current = None if name is None else (name, now)

    def v2_playbook_on_task_start(self, task: Any, is_conditional: Any) -> None:
        self._task_begins(task.get_name())
        super().v2_playbook_on_task_start(task, is_conditional)

    def v2_playbook_on_handler_task_start(self, task: Any) -> None:
        self._task_begins(task.get_name())
        super().v2_playbook_on_handler_task_start(task)

    def v2_playbook_on_stats(self, stats: Any) -> None:
        super().v2_playbook_on_stats(stats)
        self._task_begins(None)
        count = int(os.environ.get("ENMESH_TASK_TIMES") or 0)
        slowest = sorted(self._task_seconds.items(), key=lambda item: -item[1])[:count]
        if slowest:
            self._display.display(f"slowest {len(slowest)} tasks (seconds, all hosts):")
        for name, seconds in slowest:
            self._display.display(f"{seconds:8.1f}  {name}")

    def v2_runner_retry(self, result: Any) -> None:
        outcome = getattr(result, "result", None)  # ansible-core 2.19; `_result` before
        outcome = outcome if isinstance(outcome, dict) else result._result
        attempts, retries = int(outcome.get("attempts", 1)), int(outcome.get("retries", 0))
        if attempts == 1 or attempts % SHOW_EVERY == 0:
            name = result.task_name or result.task
            host = self.host_label(result)
            self._display.display(f"waiting: [{host}]: {name} (try {attempts} of {retries})")
