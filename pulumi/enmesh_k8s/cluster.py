"""`Cluster`: the Kubernetes provider everything else uses.

local and baremetal stacks use an existing kubeconfig context; aws, azure and gcp stacks
create a managed cluster (EKS, AKS, GKE) with a node pool sized from the stack config and
hand its kubeconfig (a secret output) to the provider.
"""

from __future__ import annotations

import base64
import json

import pulumi
import pulumi_kubernetes as k8s

from enmesh.k8s.config import KubeStackConfig, Provider


class Cluster(pulumi.ComponentResource):
    provider: k8s.Provider
    kubeconfig: pulumi.Output[str] | None

    def __init__(
        self, name: str, config: KubeStackConfig, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("enmesh:k8s:Cluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        builders = {Provider.AWS: _eks, Provider.AZURE: _aks, Provider.GCP: _gke}
        build = builders.get(config.provider)
        if build is None:
            self.kubeconfig = None
            self.provider = k8s.Provider(
                f"{name}-kubernetes", context=config.kubeContext, opts=child
            )
        else:
            kubeconfig, depends = build(name, config, child)
            self.kubeconfig = pulumi.Output.secret(kubeconfig)
            self.provider = k8s.Provider(
                f"{name}-kubernetes",
                kubeconfig=self.kubeconfig,
                opts=pulumi.ResourceOptions(parent=self, depends_on=depends),
            )
        self.register_outputs({"kubeconfig": self.kubeconfig})


def _eks(
    name: str, config: KubeStackConfig, opts: pulumi.ResourceOptions
) -> tuple[pulumi.Output[str], list[pulumi.Resource]]:
    import pulumi_aws as aws  # noqa: PLC0415  (cloud SDKs load only for their stacks)
    import pulumi_eks as eks  # noqa: PLC0415

    region = aws.Provider(f"{name}-aws", region=config.region, opts=opts)
    nodes = config.nodeCount or 1
    cluster = eks.Cluster(
        name,
        version=config.kubernetesVersion,
        instance_type=config.nodeSize,
        desired_capacity=nodes,
        min_size=nodes,
        max_size=nodes * 2,
        create_oidc_provider=True,
        opts=pulumi.ResourceOptions(parent=opts.parent, providers={"aws": region}),
    )
    return cluster.kubeconfig_json, [cluster]


def _aks(
    name: str, config: KubeStackConfig, opts: pulumi.ResourceOptions
) -> tuple[pulumi.Output[str], list[pulumi.Resource]]:
    from pulumi_azure_native import containerservice, resources  # noqa: PLC0415

    group = resources.ResourceGroup(f"{name}-rg", location=config.region, opts=opts)
    cluster = containerservice.ManagedCluster(
        name,
        resource_group_name=group.name,
        location=config.region,
        dns_prefix=name,
        kubernetes_version=config.kubernetesVersion,
        identity=containerservice.ManagedClusterIdentityArgs(
            type=containerservice.ResourceIdentityType.SYSTEM_ASSIGNED
        ),
        agent_pool_profiles=[
            containerservice.ManagedClusterAgentPoolProfileArgs(
                name="system",
                mode=containerservice.AgentPoolMode.SYSTEM,
                count=config.nodeCount,
                vm_size=config.nodeSize,
                os_type=containerservice.OSType.LINUX,
            )
        ],
        opts=opts,
    )
    credentials = containerservice.list_managed_cluster_user_credentials_output(
        resource_group_name=group.name, resource_name=cluster.name
    )
    kubeconfig = credentials.kubeconfigs.apply(
        lambda configs: base64.b64decode(configs[0].value).decode()
    )
    return kubeconfig, [cluster]


def _gke(
    name: str, config: KubeStackConfig, opts: pulumi.ResourceOptions
) -> tuple[pulumi.Output[str], list[pulumi.Resource]]:
    from pulumi_gcp import container  # noqa: PLC0415

    cluster = container.Cluster(
        name,
        project=config.gcpProject,
        location=config.region,
        min_master_version=config.kubernetesVersion,
        remove_default_node_pool=True,
        initial_node_count=1,
        deletion_protection=False,
        opts=opts,
    )
    pool = container.NodePool(
        f"{name}-nodes",
        project=config.gcpProject,
        location=config.region,
        cluster=cluster.name,
        node_count=config.nodeCount,
        node_config=container.NodePoolNodeConfigArgs(
            machine_type=config.nodeSize,
            oauth_scopes=["https://www.googleapis.com/auth/cloud-platform"],
        ),
        opts=opts,
    )
    kubeconfig = pulumi.Output.all(
        cluster.name, cluster.endpoint, cluster.master_auth.cluster_ca_certificate
    ).apply(lambda values: _gke_kubeconfig(str(values[0]), str(values[1]), str(values[2])))
    return kubeconfig, [cluster, pool]


def _gke_kubeconfig(name: str, endpoint: str, ca_certificate: str) -> str:
    """A kubeconfig that authenticates with gke-gcloud-auth-plugin (no static credentials)."""
    context = f"gke-{name}"
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": context,
                    "cluster": {
                        "server": f"https://{endpoint}",
                        "certificate-authority-data": ca_certificate,
                    },
                }
            ],
            "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
            "current-context": context,
            "users": [
                {
                    "name": context,
                    "user": {
                        "exec": {
                            "apiVersion": "client.authentication.k8s.io/v1beta1",
                            "command": "gke-gcloud-auth-plugin",
                            "provideClusterInfo": True,
                        }
                    },
                }
            ],
        },
        sort_keys=True,
    )
