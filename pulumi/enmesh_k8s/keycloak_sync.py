"""The realm sync Job: Keycloak imports the realm only at its first start
(`--import-realm` skips a realm that exists), so a model change would never reach a
running Keycloak. This Job runs `enmesh deploy keycloak-realm` with the realm Secret,
as `enmesh apply` syncs on hosts: groups and users enmesh manages are created, aligned or
removed, users made in Keycloak by hand stay. The pod template carries a digest of the
realm, so a changed realm replaces the Job (a Job's template cannot change) and it runs
again; an unchanged one leaves it alone. It retries while Keycloak starts.
"""

from __future__ import annotations

import hashlib

import pulumi
import pulumi_kubernetes as k8s

from enmesh.compile.identity import REALM
from enmesh.k8s.config import KubeStackConfig
from enmesh.k8s.layout import KEYCLOAK_HTTPS, KubeLayout
from enmesh_k8s import workload as w
from enmesh_k8s.tls import CA_FILE

core = k8s.core.v1
TOOLS_USER = 10000  # the enmesh image's uid, as for the routers and enmesh-auth
REALM_DIR, CA_DIR = "/etc/enmesh-realm", "/etc/enmesh-ca"
DIGEST_ANNOTATION = "enmesh.io/realm-digest"
RETRIES = 12  # Keycloak's first start (database, build, import) takes minutes


def realm_sync_job(  # noqa: PLR0917
    name: str,
    layout: KubeLayout,
    config: KubeStackConfig,
    realm: pulumi.Output[str],
    realm_secret: pulumi.Output[str],
    credentials: pulumi.Output[str],
    tls_secret: pulumi.Input[str],
    opts: pulumi.ResourceOptions,
) -> k8s.batch.v1.Job:
    names = layout.names
    selector, object_meta, account = w.identity(
        names.stack, names.namespace, "keycloak-sync", f"{names.keycloak}-sync", opts
    )
    digest = realm.apply(lambda text: hashlib.sha256(text.encode()).hexdigest()[:16])
    url = f"https://{names.service_host(names.keycloak)}:{KEYCLOAK_HTTPS}"
    container = core.ContainerArgs(
        name="realm-sync",
        image=config.toolsImage,
        command=[
            "enmesh",
            "deploy",
            "keycloak-realm",
            f"--realm-file={REALM_DIR}/{REALM}-realm.json",
            f"--url={url}",
            f"--ca={CA_DIR}/{CA_FILE}",
        ],
        env=[w.secret_key_env("KEYCLOAK_ADMIN_PASSWORD", credentials, "admin-password")],
        volume_mounts=[w.mount("realm", REALM_DIR), w.mount("ca", CA_DIR)],
        resources=w.resources("100m", "128Mi"),
        security_context=w.container_security(),
    )
    ca_only = core.VolumeArgs(
        name="ca",
        secret=core.SecretVolumeSourceArgs(
            secret_name=tls_secret, items=[core.KeyToPathArgs(key=CA_FILE, path=CA_FILE)]
        ),
    )
    return k8s.batch.v1.Job(
        name,
        metadata=object_meta,
        spec=k8s.batch.v1.JobSpecArgs(
            backoff_limit=RETRIES,
            template=core.PodTemplateSpecArgs(
                metadata=k8s.meta.v1.ObjectMetaArgs(
                    labels=selector, annotations={DIGEST_ANNOTATION: digest}
                ),
                spec=core.PodSpecArgs(
                    service_account_name=account,
                    automount_service_account_token=False,
                    security_context=w.pod_security(TOOLS_USER),
                    restart_policy="OnFailure",
                    containers=[container],
                    volumes=[w.tls_volume("realm", realm_secret), ca_only],
                ),
            ),
        ),
        opts=pulumi.ResourceOptions.merge(
            opts, pulumi.ResourceOptions(replace_on_changes=["spec"], delete_before_replace=True)
        ),
    )
