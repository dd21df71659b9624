"""Live apply on Kubernetes: which compiled files go into the routers' config Secret, and
what in them needs new pods.

The Secret keeps one name and is updated in place. kubelet then rewrites the mounted files
(a new hidden directory, one atomic swap of the `..data` symlink, within its sync period,
about a minute by default), and enmesh-router, run with `--watch-config`, sees their
contents change and reloads them as SIGHUP would. So the pod template must change only
where a reload cannot do the job:

- enmesh-router: the `router` entity (id and mode cannot change in a running router) and
  the listeners (their ports are the pod's container ports, Services and probes).
  Addresses, autoLinks, linkRoutes, connectors, vhost policies (users' rights, limits)
  and the admission settings reload live.
- qdrouterd 1.19 and skupper-router 3.x read their config file at start-up only: SIGHUP
  is caught and does nothing but ignore later signals (`signal_handler` in their
  `router/src/main.c`), and no file is watched. Their runtime changes go through AMQP
  management (qdmanage / skmanage), which enmesh does not drive for them. For these
  engines every config change still makes a new pod template, and the pods roll.

A volume's `items` are part of the pod template, so the file set must not change with the
model: the vhost policies (one file per address space on hosts) are merged into one file,
which the routers read from their policyDir like any other.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from enmesh.compile.engines import Engine
from enmesh.compile.identity import RIGHTS_DIR
from enmesh.control.entities import router_entities

CONFIG_PREFIXES = ("routers/", "auth/", "deploy.json")
POLICY_PREFIX = "auth/policies/"
POLICIES_FILE = POLICY_PREFIX + "vhosts.json"
WATCH_SECONDS = 2  # how often enmesh-router looks at its files (a few KB read)
_RESTART_ENTITIES = ("router", "listener")


def config_files(files: Mapping[str, str]) -> dict[str, str]:
    """The router config Secret's files: every vhost policy in one file."""
    # A Keycloak stack's rights files are for the smoke check on hosts; routers never
    # read them (and one per space would change the volume's items, rolling the pods).
    chosen = {
        path: text
        for path, text in files.items()
        if path.startswith(CONFIG_PREFIXES) and not path.startswith((POLICY_PREFIX, RIGHTS_DIR))
    }
    policies = [
        entry
        for path, text in sorted(files.items())
        if path.startswith(POLICY_PREFIX)
        for entry in json.loads(text)
    ]
    chosen[POLICIES_FILE] = json.dumps(policies, indent=2, sort_keys=True) + "\n"
    return dict(sorted(chosen.items()))


def restart_hash(files: Mapping[str, str], engine: Engine) -> str:
    """Short hash of what needs new pods to take effect (the pod template carries it)."""
    digest = hashlib.sha256(f"{engine}\0".encode())
    for path, text in sorted(config_files(files).items()):
        if engine is not Engine.ENMESH_ROUTER:
            digest.update(path.encode() + b"\0" + text.encode() + b"\0")
        elif path.startswith("routers/"):
            entities = router_entities(text, path)
            fixed = {f"{k[0]} {k[1]}": v for k, v in entities.items() if k[0] in _RESTART_ENTITIES}
            digest.update(path.encode() + b"\0" + json.dumps(fixed, sort_keys=True).encode())
    return digest.hexdigest()[:10]
