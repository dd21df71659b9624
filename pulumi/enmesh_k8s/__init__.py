"""enmesh's Kubernetes components (ComponentResources `enmesh:k8s:<Type>`).

This is a package inside `pulumi/`, not `pulumi/` itself: an `__init__.py` there would
shadow the `pulumi` library for the program.
"""
