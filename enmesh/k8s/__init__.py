"""Kubernetes stacks: stack config, running the Pulumi program under mocks, schema checks.

The Pulumi program itself (`pulumi/__main__.py` and its components in
`pulumi/enmesh_k8s/`) builds the resources; this package is what the CLI and the tests
need around it without a cluster or the Pulumi CLI.
"""
