"""`pulumi up -s <stack>`: enmesh on Kubernetes (see enmesh_k8s.program)."""

from enmesh_k8s.program import main

main()
