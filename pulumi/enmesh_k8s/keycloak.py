"""`Keycloak`: the identity provider, its PostgreSQL database and the imported realm.

Admin and database passwords are generated with pulumi-random and live only in Secrets;
containers read them through `secretKeyRef`. The realm (users, groups, passwords) is a
Secret too, imported at start-up with `--import-realm`.
"""

from __future__ import annotations

from collections.abc import Mapping

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random

from enmesh.auth.realm import ConsoleClient, realm_json
from enmesh.compile.identity import REALM
from enmesh.k8s.config import KubeStackConfig
from enmesh.k8s.layout import KEYCLOAK_HTTPS, KubeLayout
from enmesh_k8s import keycloak_provider as provider
from enmesh_k8s import workload as w
from enmesh_k8s.keycloak_sync import realm_sync_job
from enmesh_k8s.network import POSTGRES

core = k8s.core.v1
apps = k8s.apps.v1
KEYCLOAK_USER = 1000
POSTGRES_USER = 999
MANAGEMENT_PORT = 9000
TLS_DIR = "/opt/keycloak/conf/tls"
DB_NAME = "keycloak"


class Keycloak(pulumi.ComponentResource):
    url: str
    admin_secret_name: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        *,
        layout: KubeLayout,
        config: KubeStackConfig,
        tls_secret: pulumi.Input[str],
        passwords: Mapping[str, pulumi.Output[str]],  # user Secret name -> password
        lookup_secret: pulumi.Output[str],  # enmesh-auth's service-account client
        console_secret: pulumi.Output[str] | None = None,  # the console's OIDC client
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("enmesh:k8s:Keycloak", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        names, namespace = layout.names, layout.names.namespace
        # Generated here, as before the stack's secrets listed them (renaming the
        # resources would give a running Keycloak and its database new passwords).
        admin = random.RandomPassword(f"{name}-admin", length=32, special=False, opts=child)
        database = random.RandomPassword(f"{name}-db", length=32, special=False, opts=child)
        credentials = core.Secret(
            f"{name}-credentials",
            metadata=w.metadata(f"{names.keycloak}-credentials", namespace, _labels(names.stack)),
            string_data={
                "admin-username": "admin",
                "admin-password": admin.result,
                "db-username": DB_NAME,
                "db-password": database.result,
            },
            opts=child,
        )
        self.admin_secret_name = credentials.metadata.apply(lambda m: str(m.name))
        secret_names = sorted(passwords)
        console_url = config.consoleUrl

        def build_realm(values: list[str]) -> str:
            lookup, console, *user_passwords = values
            client = ConsoleClient(console, console_url) if console and console_url else None
            users = dict(zip(secret_names, user_passwords, strict=True))
            return realm_json(layout.model, users, lookup, client)

        realm = pulumi.Output.all(
            lookup_secret, console_secret or "", *(passwords[s] for s in secret_names)
        ).apply(build_realm)
        realm_file: pulumi.Output[str] = pulumi.Output.secret(realm)
        realm_secret = core.Secret(
            f"{name}-realm",
            metadata=w.metadata(f"{names.keycloak}-realm", namespace, _labels(names.stack)),
            string_data={f"{REALM}-realm.json": realm_file},
            opts=child,
        )
        provider_sources = provider.sources_config_map(
            f"{name}-provider",
            w.metadata(f"{names.keycloak}-provider", namespace, _labels(names.stack)),
            child,
        )
        self._database(name, layout, config, self.admin_secret_name, child)
        host = config.dnsNames[0] if config.dnsNames else names.service_host(names.keycloak)
        self.url = f"https://{host}:{KEYCLOAK_HTTPS}/realms/{REALM}"
        self._server(
            name,
            layout,
            config,
            host,
            self.admin_secret_name,
            realm_secret.metadata.apply(lambda m: str(m.name)),
            provider_sources.metadata.apply(lambda m: str(m.name)),
            tls_secret,
            child,
        )
        realm_sync_job(
            f"{name}-realm-sync",
            layout,
            config,
            realm_file,
            realm_secret.metadata.apply(lambda m: str(m.name)),
            self.admin_secret_name,
            tls_secret,
            child,
        )
        self.register_outputs({"url": self.url, "adminSecret": self.admin_secret_name})

    @staticmethod
    def _database(
        name: str,
        layout: KubeLayout,
        config: KubeStackConfig,
        credentials: pulumi.Output[str],
        opts: pulumi.ResourceOptions,
    ) -> None:
        names, namespace = layout.names, layout.names.namespace
        selector = w.labels(names.stack, "keycloak-db")
        w.service_account(names.keycloak_db, namespace, selector, False, opts)
        core.Service(
            f"{name}-db",
            metadata=w.metadata(names.keycloak_db, namespace, selector),
            spec=core.ServiceSpecArgs(
                selector=selector,
                ports=[w.service_port("postgres", POSTGRES)],
            ),
            opts=opts,
        )
        container = core.ContainerArgs(
            name="postgres",
            image=config.postgresImage,
            env=[
                w.secret_key_env("POSTGRES_USER", credentials, "db-username"),
                w.secret_key_env("POSTGRES_PASSWORD", credentials, "db-password"),
                core.EnvVarArgs(name="POSTGRES_DB", value=DB_NAME),
                core.EnvVarArgs(name="PGDATA", value="/var/lib/postgresql/data/pgdata"),
            ],
            ports=[core.ContainerPortArgs(name="postgres", container_port=POSTGRES)],
            volume_mounts=[
                w.mount("data", "/var/lib/postgresql/data", read_only=False),
                w.mount("run", "/var/run/postgresql", read_only=False),
                w.mount("tmp", "/tmp", read_only=False),
            ],
            resources=w.resources("250m", "512Mi"),
            security_context=w.container_security(),
            readiness_probe=w.exec_probe(
                ["pg_isready", "-U", DB_NAME, "-d", DB_NAME], period=10, timeout=5
            ),
            liveness_probe=w.tcp_probe("postgres", period=20),
        )
        apps.StatefulSet(
            f"{name}-db",
            metadata=w.metadata(names.keycloak_db, namespace, selector),
            spec=apps.StatefulSetSpecArgs(
                service_name=names.keycloak_db,
                replicas=1,
                selector=k8s.meta.v1.LabelSelectorArgs(match_labels=selector),
                template=core.PodTemplateSpecArgs(
                    metadata=k8s.meta.v1.ObjectMetaArgs(labels=selector),
                    spec=core.PodSpecArgs(
                        service_account_name=names.keycloak_db,
                        automount_service_account_token=False,
                        security_context=w.pod_security(POSTGRES_USER),
                        containers=[container],
                        volumes=[w.empty_dir("run", "16Mi"), w.empty_dir("tmp")],
                    ),
                ),
                volume_claim_templates=[
                    w.data_claim(selector, config.brokerStorageClass, config.keycloakStorageSize)
                ],
            ),
            opts=opts,
        )

    @staticmethod
    def _server(  # noqa: PLR0917
        name: str,
        layout: KubeLayout,
        config: KubeStackConfig,
        host: str,
        credentials: pulumi.Output[str],
        realm_secret: pulumi.Output[str],
        provider_sources: pulumi.Output[str],
        tls_secret: pulumi.Input[str],
        opts: pulumi.ResourceOptions,
    ) -> None:
        names, namespace = layout.names, layout.names.namespace
        selector = w.labels(names.stack, "keycloak")
        w.service_account(names.keycloak, namespace, selector, False, opts)
        core.Service(
            f"{name}-http",
            metadata=w.metadata(names.keycloak, namespace, selector),
            spec=core.ServiceSpecArgs(
                type=config.provider.client_service_type,
                selector=selector,
                ports=[w.service_port("https", KEYCLOAK_HTTPS)],
            ),
            opts=opts,
        )
        env = [
            w.secret_key_env("KC_BOOTSTRAP_ADMIN_USERNAME", credentials, "admin-username"),
            w.secret_key_env("KC_BOOTSTRAP_ADMIN_PASSWORD", credentials, "admin-password"),
            w.secret_key_env("KC_DB_USERNAME", credentials, "db-username"),
            w.secret_key_env("KC_DB_PASSWORD", credentials, "db-password"),
            core.EnvVarArgs(name="KC_DB", value="postgres"),
            core.EnvVarArgs(name="KC_DB_URL_HOST", value=names.service_host(names.keycloak_db)),
            core.EnvVarArgs(name="KC_DB_URL_DATABASE", value=DB_NAME),
            core.EnvVarArgs(name="KC_HOSTNAME", value=host),
            core.EnvVarArgs(name="KC_HTTP_ENABLED", value="false"),
            core.EnvVarArgs(name="KC_HTTPS_PORT", value=str(KEYCLOAK_HTTPS)),
            core.EnvVarArgs(name="KC_HTTPS_CERTIFICATE_FILE", value=f"{TLS_DIR}/keycloak.crt"),
            core.EnvVarArgs(name="KC_HTTPS_CERTIFICATE_KEY_FILE", value=f"{TLS_DIR}/keycloak.key"),
            core.EnvVarArgs(name="KC_HEALTH_ENABLED", value="true"),
        ]
        container = core.ContainerArgs(
            name="keycloak",
            image=config.keycloakImage,
            args=["start", "--import-realm"],
            env=env,
            ports=[
                core.ContainerPortArgs(name="https", container_port=KEYCLOAK_HTTPS),
                core.ContainerPortArgs(name="management", container_port=MANAGEMENT_PORT),
            ],
            volume_mounts=[
                w.mount("tls", TLS_DIR),
                w.mount("realm", "/opt/keycloak/data/import"),
                w.mount("data", "/opt/keycloak/data/tmp", read_only=False),
                # `start` re-augments the server into lib/quarkus on a read-only image.
                w.mount("quarkus", "/opt/keycloak/lib/quarkus", read_only=False),
                w.mount("tmp", "/tmp", read_only=False),
                provider.providers_mount(),  # enmesh's SCRAM keys (built by the init containers)
            ],
            resources=w.resources("500m", "1Gi"),
            security_context=w.container_security(),
            startup_probe=core.ProbeArgs(
                http_get=core.HTTPGetActionArgs(
                    port="management", path="/health/started", scheme="HTTPS"
                ),
                period_seconds=10,
                failure_threshold=60,
            ),
            readiness_probe=w.http_probe("management", "/health/ready", "HTTPS"),
            liveness_probe=w.http_probe("management", "/health/live", "HTTPS"),
        )
        apps.Deployment(
            name,
            metadata=w.metadata(names.keycloak, namespace, selector),
            spec=apps.DeploymentSpecArgs(
                replicas=1,
                selector=k8s.meta.v1.LabelSelectorArgs(match_labels=selector),
                template=core.PodTemplateSpecArgs(
                    metadata=k8s.meta.v1.ObjectMetaArgs(labels=selector),
                    spec=core.PodSpecArgs(
                        service_account_name=names.keycloak,
                        automount_service_account_token=False,
                        security_context=w.pod_security(KEYCLOAK_USER),
                        init_containers=provider.init_containers(config),
                        containers=[container],
                        volumes=[
                            *provider.volumes(provider_sources),
                            w.tls_volume("tls", tls_secret),
                            w.tls_volume("realm", realm_secret),
                            w.empty_dir("data", "256Mi"),
                            w.empty_dir("quarkus", "512Mi"),
                            w.empty_dir("tmp", "256Mi"),
                        ],
                    ),
                ),
            ),
            opts=opts,
        )


def _labels(stack: str) -> dict[str, str]:
    return w.labels(stack, "keycloak")
