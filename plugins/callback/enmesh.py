"""Ansible's default output, except that a wait is not shown as a failure.

Tasks that wait for something to come up (`until:` with `retries:`: the broker booting,
a router reaching its peers, the Spark worker registering) print `FAILED - RETRYING` on
every try with the default callback, which reads like an error to anyone watching
`make up`. This prints `waiting: [host]: task (try N of M)` on the first try and every
tenth after it, and nothing else changes. ansible.cfg selects it
(`stdout_callback = enmesh`).
"""

from __future__ import annotations

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

    def v2_runner_retry(self, result: Any) -> None:
        outcome = getattr(result, "result", None)  # ansible-core 2.19; `_result` before
        outcome = outcome if isinstance(outcome, dict) else result._result
        attempts, retries = int(outcome.get("attempts", 1)), int(outcome.get("retries", 0))
        if attempts == 1 or attempts % SHOW_EVERY == 0:
            name = result.task_name or result.task
            host = self.host_label(result)
            self._display.display(f"waiting: [{host}]: {name} (try {attempts} of {retries})")
