"""What every enmesh workload shares: labels, hardened containers, probes, Secret volumes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pulumi
import pulumi_kubernetes as k8s

core = k8s.core.v1
meta = k8s.meta.v1

PART_OF = "enmesh"


def labels(stack: str, component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": component,
        "app.kubernetes.io/instance": stack,
        "app.kubernetes.io/part-of": PART_OF,
    }


def metadata(
    name: pulumi.Input[str],
    namespace: pulumi.Input[str],
    object_labels: Mapping[str, str],
    annotations: Mapping[str, str] | None = None,
) -> meta.ObjectMetaArgs:
    return meta.ObjectMetaArgs(
        name=name, namespace=namespace, labels=dict(object_labels), annotations=annotations
    )


def resources(cpu: str, memory: str) -> core.ResourceRequirementsArgs:
    """Requests as given; memory limited to the request (no overcommit), CPU to twice it."""
    return core.ResourceRequirementsArgs(
        requests={"cpu": cpu, "memory": memory},
        limits={"cpu": _double(cpu), "memory": memory},
    )


def _double(cpu: str) -> str:
    if cpu.endswith("m"):
        return f"{int(cpu[:-1]) * 2}m"
    return f"{float(cpu) * 2:g}"


def service_port(name: str, port: int) -> core.ServicePortArgs:
    """A Service port that targets the container port of the same name."""
    return core.ServicePortArgs(name=name, port=port, target_port=name, protocol="TCP")


def container_security() -> core.SecurityContextArgs:
    return core.SecurityContextArgs(
        run_as_non_root=True,
        allow_privilege_escalation=False,
        read_only_root_filesystem=True,
        capabilities=core.CapabilitiesArgs(drop=["ALL"]),
        seccomp_profile=core.SeccompProfileArgs(type="RuntimeDefault"),
    )


def pod_security(user: int) -> core.PodSecurityContextArgs:
    return core.PodSecurityContextArgs(
        run_as_non_root=True,
        run_as_user=user,
        run_as_group=user,
        fs_group=user,
        seccomp_profile=core.SeccompProfileArgs(type="RuntimeDefault"),
    )


def tcp_probe(port: str, period: int = 10, failures: int = 3) -> core.ProbeArgs:
    return core.ProbeArgs(
        tcp_socket=core.TCPSocketActionArgs(port=port),
        period_seconds=period,
        failure_threshold=failures,
    )


def http_probe(port: str, path: str, scheme: str = "HTTP", failures: int = 3) -> core.ProbeArgs:
    return core.ProbeArgs(
        http_get=core.HTTPGetActionArgs(port=port, path=path, scheme=scheme),
        period_seconds=10,
        failure_threshold=failures,
    )


def exec_probe(command: Sequence[str], period: int = 30, timeout: int = 20) -> core.ProbeArgs:
    return core.ProbeArgs(
        exec_=core.ExecActionArgs(command=list(command)),
        period_seconds=period,
        timeout_seconds=timeout,
        failure_threshold=3,
    )


def secret_key_env(name: str, secret: pulumi.Input[str], key: str) -> core.EnvVarArgs:
    """An environment variable read from a Secret: the value never appears in the pod spec."""
    return core.EnvVarArgs(
        name=name,
        value_from=core.EnvVarSourceArgs(
            secret_key_ref=core.SecretKeySelectorArgs(name=secret, key=key)
        ),
    )


def pod_name_env() -> core.EnvVarArgs:
    return core.EnvVarArgs(
        name="POD_NAME",
        value_from=core.EnvVarSourceArgs(
            field_ref=core.ObjectFieldSelectorArgs(field_path="metadata.name")
        ),
    )


def secret_file_key(path: str) -> str:
    """`routers/a.conf` -> `routers_a.conf`: Secret keys cannot hold `/`."""
    return path.replace("/", "_")


def files_volume(name: str, secret: pulumi.Input[str], paths: Sequence[str]) -> core.VolumeArgs:
    """A Secret holding files under their relative paths (see `secret_file_key`)."""
    return core.VolumeArgs(
        name=name,
        secret=core.SecretVolumeSourceArgs(
            secret_name=secret,
            default_mode=0o440,
            items=[core.KeyToPathArgs(key=secret_file_key(p), path=p) for p in sorted(paths)],
        ),
    )


def tls_volume(name: str, secret: pulumi.Input[str]) -> core.VolumeArgs:
    return core.VolumeArgs(
        name=name, secret=core.SecretVolumeSourceArgs(secret_name=secret, default_mode=0o440)
    )


def empty_dir(name: str, limit: str = "64Mi") -> core.VolumeArgs:
    return core.VolumeArgs(name=name, empty_dir=core.EmptyDirVolumeSourceArgs(size_limit=limit))


def disruption_budget(
    name: str, object_meta: meta.ObjectMetaArgs, opts: pulumi.ResourceOptions
) -> k8s.policy.v1.PodDisruptionBudget:
    """Voluntary disruptions (drains, upgrades) take one pod at a time."""
    return k8s.policy.v1.PodDisruptionBudget(
        name,
        metadata=object_meta,
        spec=k8s.policy.v1.PodDisruptionBudgetSpecArgs(
            max_unavailable=1,
            selector=meta.LabelSelectorArgs(match_labels=object_meta.labels),
        ),
        opts=opts,
    )


def data_claim(
    claim_labels: Mapping[str, str], storage_class: str | None, size: str
) -> core.PersistentVolumeClaimArgs:
    """The `data` volume claim of a StatefulSet: one ReadWriteOnce volume per pod."""
    return core.PersistentVolumeClaimArgs(
        metadata=meta.ObjectMetaArgs(name="data", labels=dict(claim_labels)),
        spec=core.PersistentVolumeClaimSpecArgs(
            access_modes=["ReadWriteOnce"],
            storage_class_name=storage_class,
            resources=core.VolumeResourceRequirementsArgs(requests={"storage": size}),
        ),
    )


def mount(name: str, path: str, read_only: bool = True) -> core.VolumeMountArgs:
    return core.VolumeMountArgs(name=name, mount_path=path, read_only=read_only)


def spread(selector: Mapping[str, str]) -> core.AffinityArgs:
    """Prefer one pod per node: required anti-affinity would strand pods on small clusters."""
    return core.AffinityArgs(
        pod_anti_affinity=core.PodAntiAffinityArgs(
            preferred_during_scheduling_ignored_during_execution=[
                core.WeightedPodAffinityTermArgs(
                    weight=100,
                    pod_affinity_term=core.PodAffinityTermArgs(
                        topology_key="kubernetes.io/hostname",
                        label_selector=meta.LabelSelectorArgs(match_labels=dict(selector)),
                    ),
                )
            ]
        )
    )


def identity(
    stack: str,
    namespace: pulumi.Input[str],
    component: str,
    name: str,
    opts: pulumi.ResourceOptions,
) -> tuple[dict[str, str], meta.ObjectMetaArgs, pulumi.Output[str]]:
    """A workload that calls no API: its pods' labels, its objects' metadata, and the name
    of its own ServiceAccount (without a token)."""
    selector = labels(stack, component)
    account = service_account(name, namespace, selector, False, opts)
    account_name = account.metadata.apply(lambda m: str(m.name))
    return selector, metadata(name, namespace, selector), account_name


def service_account(
    name: str,
    namespace: pulumi.Input[str],
    object_labels: Mapping[str, str],
    token: bool,
    opts: pulumi.ResourceOptions,
) -> core.ServiceAccount:
    """A ServiceAccount per workload; only the ones that call the API get a token."""
    return core.ServiceAccount(
        name,
        metadata=metadata(name, namespace, object_labels),
        automount_service_account_token=token,
        opts=opts,
    )


def spread_deployment(  # noqa: PLR0917
    name: str,
    object_meta: meta.ObjectMetaArgs,
    selector: dict[str, str],
    account: pulumi.Input[str],
    user: int,
    container: core.ContainerArgs,
    volumes: Sequence[core.VolumeArgs],
    opts: pulumi.ResourceOptions,
    replicas: int = 2,
    grace_seconds: int | None = None,
) -> k8s.apps.v1.Deployment:
    """A stateless service of `replicas` pods spread over nodes, each with its own
    token-less ServiceAccount, and a disruption budget: drains take one pod at a time."""
    deployment = k8s.apps.v1.Deployment(
        name,
        metadata=object_meta,
        spec=k8s.apps.v1.DeploymentSpecArgs(
            replicas=replicas,
            selector=meta.LabelSelectorArgs(match_labels=selector),
            template=core.PodTemplateSpecArgs(
                metadata=meta.ObjectMetaArgs(labels=selector),
                spec=core.PodSpecArgs(
                    service_account_name=account,
                    automount_service_account_token=False,
                    security_context=pod_security(user),
                    affinity=spread(selector),
                    containers=[container],
                    volumes=list(volumes),
                    termination_grace_period_seconds=grace_seconds,
                ),
            ),
        ),
        opts=opts,
    )
    disruption_budget(name, object_meta, opts)
    return deployment
