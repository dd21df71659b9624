"""`Credentials`: one generated password per Secret the compiled stack references.

The model names Secrets, never values; on Kubernetes pulumi-random fills them once and
keeps them stable across updates (on hosts `enmesh deploy secrets` does the same job).
"""

from __future__ import annotations

from collections.abc import Mapping

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random

from enmesh_k8s.workload import labels, metadata


class Credentials(pulumi.ComponentResource):
    passwords: dict[str, pulumi.Output[str]]  # Secret name -> password

    def __init__(
        self,
        name: str,
        *,
        stack: str,
        namespace: pulumi.Input[str],
        secrets: Mapping[str, str],  # Secret name -> key
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("enmesh:k8s:Credentials", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.passwords = {}
        for secret, key in sorted(secrets.items()):
            password = random.RandomPassword(secret, length=32, special=False, opts=child)
            k8s.core.v1.Secret(
                secret,
                metadata=metadata(secret, namespace, labels(stack, "credentials")),
                string_data={key: password.result},
                opts=child,
            )
            self.passwords[secret] = password.result
        self.register_outputs({})
