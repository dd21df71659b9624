"""enmesh's SCRAM provider in Keycloak's pod, built where it runs: Keycloak's image has no
JDK and enmesh ships no image of its own for it, so two init containers build it from
its sources (a ConfigMap) with the recipe the hosts use (enmesh.deploy.keycloak_provider):
the first copies the jars of Keycloak's own image, the second compiles against them in a
JDK image; Keycloak's `start` then builds the provider in. A new Keycloak image is
compiled against on its first start, so the provider follows the release it runs in.
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from enmesh.deploy.keycloak_provider import PROVIDER_SOURCES, build_script, source_files
from enmesh.k8s.config import KubeStackConfig
from enmesh_k8s import workload as w

core = k8s.core.v1
KEYCLOAK_JARS = "/opt/keycloak/lib/lib/main"
PROVIDERS_DIR = "/opt/keycloak/providers"  # where Keycloak looks for providers
SOURCES, LIBS, OUT, WORK = "/provider/src", "/provider/lib", "/provider/out", "/tmp"


def _key(path: str) -> str:
    """A ConfigMap key for a source path (keys cannot hold `/`)."""
    return path.replace("/", "__")


def sources_config_map(
    name: str, metadata: k8s.meta.v1.ObjectMetaArgs, opts: pulumi.ResourceOptions
) -> core.ConfigMap:
    return core.ConfigMap(
        name,
        metadata=metadata,
        data={_key(p): (PROVIDER_SOURCES / p).read_text(encoding="utf-8") for p in source_files()},
        opts=opts,
    )


def volumes(config_map: pulumi.Input[str]) -> list[core.VolumeArgs]:
    sources = core.VolumeArgs(
        name="provider-src",
        config_map=core.ConfigMapVolumeSourceArgs(
            name=config_map,
            items=[core.KeyToPathArgs(key=_key(p), path=p) for p in source_files()],
        ),
    )
    return [
        sources,
        w.empty_dir("provider-lib", "512Mi"),
        w.empty_dir("providers", "16Mi"),
        w.empty_dir("provider-work", "64Mi"),
    ]


def init_containers(config: KubeStackConfig) -> list[core.ContainerArgs]:
    copy = core.ContainerArgs(
        name="keycloak-jars",
        image=config.keycloakImage,
        command=["/bin/bash", "-c", f"cp {KEYCLOAK_JARS}/*.jar {LIBS}/"],
        volume_mounts=[w.mount("provider-lib", LIBS, read_only=False)],
        resources=w.resources("100m", "64Mi"),
        security_context=w.container_security(),
    )
    build = core.ContainerArgs(
        name="provider-build",
        image=config.jdkImage,
        command=["/bin/sh", "-c", build_script(SOURCES, LIBS, OUT, WORK)],
        volume_mounts=[
            w.mount("provider-src", SOURCES),
            w.mount("provider-lib", LIBS),
            w.mount("providers", OUT, read_only=False),
            w.mount("provider-work", WORK, read_only=False),
        ],
        resources=w.resources("500m", "512Mi"),
        security_context=w.container_security(),
    )
    return [copy, build]


def providers_mount() -> core.VolumeMountArgs:
    return w.mount("providers", PROVIDERS_DIR)
