"""RabbitMQ's password hash (rabbit_password_hashing_sha256), for definitions loaded at boot.

On Kubernetes the broker imports its definitions before anyone could run `rabbitmqctl
add_user`, so the router's user goes into the definitions with a hash, never the password.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

ALGORITHM = "rabbit_password_hashing_sha256"
SALT_BYTES = 4


def password_hash(password: str, salt: bytes) -> str:
    """base64(salt + sha256(salt + utf8(password))), as RabbitMQ stores it."""
    if len(salt) != SALT_BYTES:
        raise ValueError(f"RabbitMQ's salt is {SALT_BYTES} bytes, got {len(salt)}")
    digest = hashlib.sha256(salt + password.encode("utf-8")).digest()
    return base64.b64encode(salt + digest).decode("ascii")


def with_user(definitions_json: str, user: str, password: str, salt: bytes) -> str:
    """The compiled definitions plus `user` (permissions are already in them)."""
    definitions: dict[str, Any] = json.loads(definitions_json)
    users = [u for u in definitions.get("users", []) if u.get("name") != user]
    users.append(
        {
            "name": user,
            "password_hash": password_hash(password, salt),
            "hashing_algorithm": ALGORITHM,
            "tags": [],
            "limits": {},
        }
    )
    definitions["users"] = sorted(users, key=lambda u: str(u["name"]))
    return json.dumps(definitions, indent=2, sort_keys=True) + "\n"
